# Call 4 (command as run): c64 twice with main's kernels (b1, b2) and twice with grp (g1, g2),
# in the order b1 g1 b2 g2, tokens hashed: is c64's default mode reproducible run to run?
source scripts/gpu/step.sh; prompts 64 512 > /tmp/p64.jsonl; M=/tmp/specdeck-llama8b; export SPECDECK_PTX_CACHE=/tmp/ptx-long-ab; for t in b1 g1 b2 g2; do case $t in g*) export SPECDECK_KERNEL_DIR=$PWD/.gpu/grp;; *) unset SPECDECK_KERNEL_DIR;; esac; timeout 60 /tmp/w2/bin/specdeck bench --device cuda --model-path $M --prompts /tmp/p64.jsonl --json --max-new-tokens 256 --concurrency 64 > $OUT/$t.json 2>$OUT/$t.err; echo $t $?; done; python3 -c "
import json,sys
def t(f):
  L=[l for l in open(f) if l.startswith('{')]; return json.loads(L[-1])
r={k:t(sys.argv[1]+'/'+k+'.json') for k in ['b1','g1','b2','g2']}
for k,v in r.items(): print(k, v['output_tokens_per_s'], hash(json.dumps(v['token_ids']))%10**8)
" $OUT
# Output:
# b1 4766.044036741802 68390260
# g1 4808.005208001661 39094543
# b2 4833.078076269519 39094543
# g2 4775.995656469817 554343
