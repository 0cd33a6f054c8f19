# Run 26, call 8, on call 7's machine while it was still warm (carry .gpu/cuda): the Kimi-layout
# INT4 checkpoint call 7 wrote, batch-1 with its experts dequantized at load, then as stored.
M=/tmp/specdeck-kimi-int4; R=$OUT/r2; mkdir -p $R; export SPECDECK_PTX_CACHE=/tmp/ptx8; ls $M >/dev/null && python3 -c 'import json, random; r = random.Random(0); [print(json.dumps({"prompt": " ".join(f"w{r.randrange(3, 129000)}" for _ in range(64))})) for _ in range(4)]' > $R/prompts4.jsonl; for v in dequantized stored; do k=1; [ $v = dequantized ] && k=0; s=$(date +%s); SPECDECK_STORED_EXPERTS=$k timeout 300 .gpu/cuda/specdeck bench --device cuda --model-path $M --prompts $R/prompts4.jsonl --max-new-tokens 32 --json > $R/int4-b1-$v.json 2> $R/int4-b1-$v.err; echo "$v rc=$? s=$(( $(date +%s) - s ))"; head -c 600 $R/int4-b1-$v.json | tr -d '\n' | grep -o '"decode_tokens_per_s":[0-9.]*\|"prefill_ms_median":[0-9.]*\|"target-load","seconds":[0-9.]*'; echo; done; python3 -c "
import json
a,b=(json.load(open('$R/int4-b1-'+n+'.json'))['token_ids'] for n in ('stored','dequantized'))
print('equal', sum(x==y for x,y in zip(a,b)), len(a))"; tail -2 $R/int4-b1-dequantized.err
