"""Per-kernel summary of an Nsight Compute CSV (`ncu --csv --metrics ...`, as profile.sh runs
it): launches, mean duration, total, DRAM read rate, registers and active warps per kernel and
grid, largest total first.

usage: python3 ncu_summary.py ncu.csv
"""
import csv, collections, io, sys
txt=open(sys.argv[1]).read()
txt=txt[txt.index('"ID"'):]
rows=list(csv.DictReader(io.StringIO(txt)))
k=collections.OrderedDict()
for r in rows:
    key=(r['ID'],r['Kernel Name'],r['Grid Size'],r['Block Size'])
    k.setdefault(key,{})[r['Metric Name']]=r['Metric Value']
agg=collections.defaultdict(lambda:[0,0.0,0.0,[],None,None])
tot=0
for (i,name,grid,block),m in k.items():
    t=float(m['gpu__time_duration.sum'].replace(',',''))/1000
    b=float(m['dram__bytes_read.sum'].replace(',',''))
    a=agg[(name,grid,block)]; a[0]+=1; a[1]+=t; a[2]+=b; a[3].append(m.get('dram__throughput.avg.pct_of_peak_sustained_elapsed')); a[4]=m.get('launch__registers_per_thread'); a[5]=m.get('sm__warps_active.avg.pct_of_peak_sustained_active')
    tot+=t
print("kernels",len(k),"total us",round(tot,1))
for (name,grid,block),(n,t,b,p,r,w) in sorted(agg.items(), key=lambda x:-x[1][1]):
    print(f"{name:26s} {grid:13s} {block:12s} n={n:3d} us/each={t/n:7.2f} total={t:7.1f} GB/s={b/(t*1e-6)/1e9 if t else 0:6.0f} dram%={p[0]} regs={r} warps%={w}")
