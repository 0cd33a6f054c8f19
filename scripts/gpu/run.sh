#!/usr/bin/env bash
# The CUDA backend on the GPU machine: correctness, then every timing, each step
# independent (a failed or timed-out step is logged and the next one runs), results under
# $OUT, a short table printed last. Builds nothing: it runs the specdeck binary staged
# beside it by scripts/gpu/stage.sh. Total time stays under 500 s plus the closing table
# (run 1: 2.5 minutes), within the 540 s a device call on the 2-GPU kind is given.
#
# usage (from the repository root on the GPU machine):  bash .gpu/cuda/run.sh [all|qwen|identity]
#   qwen: only step 8 (the real-weights pair); identity: only what TP 2 == TP 1 needs under
#   --enable-deterministic-inference (the 8B shape and, when sent, the Qwen pair); then the
#   table.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/specdeck"
OUT="${OUT:-/tmp/specdeck-gpu-out}"
MODEL="${SPECDECK_8B_DIR:-/tmp/specdeck-llama8b}"
BUDGET_S="${SPECDECK_GPU_BUDGET_S:-500}"
export NCCL_NVLS_ENABLE=0
export SPECDECK_PTX_CACHE="$OUT/ptx-cache"
mkdir -p "$OUT"
T0=$(date +%s)
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
ONLY="${1:-all}"
export BIN OUT MODEL
# in_run GROUP...: whether this run includes any of the groups (`all` includes everything).
in_run() { [ "$ONLY" = all ] || [[ " $* " == *" $ONLY "* ]]; }

source "$HERE/step.sh"
echo "baseline $(mem_used)" > "$OUT/memory.log"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1

if in_run full; then
# 1. Correctness and micro-benchmarks (ops vs CPU, graphs, bandwidth, GEMM, small-model
#    logits, speculative greedy == target-only).
step checks 150 "$BIN" cuda-check --out "$OUT/checks" \
    --sections conformance,graphs,bandwidth,gemm,model-logits,speculative-greedy

# Kernels launch with programmatic dependent launch; should that fail on this driver (a
# launch error in the checks), every later step runs without it, and the table says so.
if grep -qs "launch of" "$OUT/checks.out" "$OUT/checks.err"; then
    export SPECDECK_PDL=0
    echo "pdl off: launch errors in the checks" | tee -a "$OUT/steps.log"
fi

# 2. Tensor parallel across every GPU of the machine (2-GPU kind): the sharded MLP block,
#    then the engine's model code and rank threads on the small checkpoint vs one GPU.
if ((GPUS >= 2)); then
    step tp 90 "$BIN" cuda-check --out "$OUT/tp" --sections tensor-parallel,tensor-parallel-model
fi

fi

# 3. The Llama-3.1-8B-shaped checkpoint with random bf16 weights, written here by torch.
if in_run identity && [ ! -f "$MODEL/model.safetensors.index.json" ]; then
    step write8b 120 python3 "$HERE/write_llama8b.py" "$MODEL"
fi

if in_run full; then
# 4. Decode tokens/s vs the HBM floor, graphs, verify/decode cost, cold start, relaunch.
step large 170 "$BIN" cuda-check --out "$OUT/large" --large-model "$MODEL" \
    --sections bandwidth,large-model-steps,large-model-engine

# 5. The engine itself (`specdeck bench`, target-only, batch 1) on the 8B shape: CUDA
#    graphs replayed in steady state, the same run eager (--cuda-graph-max-bs 0: the tokens
#    must be the same), and over 2 GPUs (--tp-size 2: the tokens must be the same).
fi

PROMPTS8B="$OUT/prompts-8b.jsonl"
for i in 0 1; do
    echo "{\"prompt\": \"$(seq $((1000 + i)) 37 $((1000 + i + 37 * 31)) | sed 's/^/w/' | paste -sd' ')\"}"
done >"$PROMPTS8B"
engine_bench() {
    local name=$1 limit=$2
    shift 2
    step "$name" "$limit" "$BIN" bench --device cuda --model-path "$MODEL" --prompts "$PROMPTS8B" \
        --max-new-tokens 128 --json "$@"
}
if in_run full; then
engine_bench engine-graphs 60
engine_bench engine-eager 60 --cuda-graph-max-bs 0
# The same graphs without programmatic dependent launch: what overlapping kernels buys.
SPECDECK_PDL=0 engine_bench engine-graphs-nopdl 60
# The same graphs with each residual add as a launch of its own: what fusing it into the o
# and down matmuls buys.
SPECDECK_FUSED_RESIDUAL=0 engine_bench engine-graphs-unfused 60
if ((GPUS >= 2)); then
    engine_bench engine-tp2 90 --tp-size 2
    # The same over NCCL alone: what the all-reduce through peer memory buys.
    SPECDECK_PEER_ALLREDUCE=0 engine_bench engine-tp2-nccl 90 --tp-size 2
fi
fi

# 5b. TP 2 == TP 1 bit for bit: with --enable-deterministic-inference the prefill goes through
#     the same batch-invariant matmuls as decode, whose K cut makes a 2-way split exact.
if in_run identity && ((GPUS >= 2)); then
    engine_bench engine-det 60 --enable-deterministic-inference
    engine_bench engine-det-tp2 90 --enable-deterministic-inference --tp-size 2
fi

if in_run full; then
# 6. The same weights through transformers (greedy, batch 1, each cache setting).
step hf 140 python3 "$HERE/hf_baseline.py" "$MODEL" --budget-s 120

# 7. Ctrl-C during weight load: interrupt a cold start mid-load; cuda-check must stop at
#    once with status 130 naming the section, and GPU memory must return to the baseline.
ctrl_c() {
    "$BIN" cuda-check --out "$OUT/ctrlc-run" --large-model "$MODEL" --sections large-model-engine \
        2>"$OUT/ctrlc-run.err" &
    local pid=$! base peak=0 t=0
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
    # Wait until the load has put at least 2 GiB on the GPU (or 30 s).
    while ((t < 300)); do
        local now
        now=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
        ((now > peak)) && peak=$now
        ((now > base + 2048)) && break
        sleep 0.1
        t=$((t + 1))
    done
    kill -INT "$pid"
    wait "$pid"
    local rc=$? after message section
    sleep 2
    after=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
    message=$(grep -m1 'interrupted by' "$OUT/ctrlc-run.err" | tr -d '"\\')
    section=$(sed -n 's/.*during section \([a-z-]*\).*/\1/p' <<<"$message")
    echo "{\"baseline_mib\": $base, \"during_load_mib\": $peak, \"after_mib\": $after, \"exit_status\": $rc, \"interrupted_section\": \"$section\", \"message\": \"$message\"}"
}
export -f ctrl_c
export BIN OUT MODEL
step ctrlc 45 bash -c ctrl_c

fi

# 8. Real weights, when the GGUF pieces were sent (qwen_join.sh rebuilds and checks the two
#    files): Qwen2.5-Coder-1.5B-Instruct with the 0.5B as a STANDALONE draft on 20 HumanEval
#    prompts, speculative and target-only alternating; then target-only over 2 GPUs against 1.
if in_run qwen identity && QWEN=$(bash "$HERE/qwen_join.sh" 2>"$OUT/qwen-join.err"); then
    read -r QWEN_T QWEN_D <<<"$QWEN"
    qwen_convert() {
        "$BIN" convert gguf "$QWEN_T" /tmp/specdeck-qwen-1.5b && "$BIN" convert gguf "$QWEN_D" /tmp/specdeck-qwen-0.5b
    }
    export -f qwen_convert
    export QWEN_T QWEN_D
    step qwen-convert 120 bash -c qwen_convert
    qwen_bench() {
        local name=$1 limit=$2
        shift 2
        step "$name" "$limit" "$BIN" bench --device cuda --model-path /tmp/specdeck-qwen-1.5b \
            --prompts "$HERE/prompts-20.jsonl" --max-new-tokens 128 --json "$@"
    }
    in_run qwen && qwen_bench qwen 240 --speculative-algorithm STANDALONE --speculative-draft-model-path /tmp/specdeck-qwen-0.5b \
        --speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 --compare-target-only
    # One draft pass fewer per cycle: with a drafter this close to the target's cost, fewer
    # steps can win even at a shorter accept length.
    in_run qwen && qwen_bench qwen-s3 240 --speculative-algorithm STANDALONE --speculative-draft-model-path /tmp/specdeck-qwen-0.5b \
        --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --compare-target-only
    if ((GPUS >= 2)) && in_run qwen; then
        qwen_bench qwen-tp1 90
        qwen_bench qwen-tp2 90 --tp-size 2
    fi
    if ((GPUS >= 2)) && in_run identity; then
        qwen_bench qwen-det-tp1 90 --enable-deterministic-inference
        qwen_bench qwen-det-tp2 90 --enable-deterministic-inference --tp-size 2
    fi
elif in_run qwen identity; then
    echo "qwen not run: $(tail -n 1 "$OUT/qwen-join.err")" | tee -a "$OUT/steps.log"
fi

echo "end $(mem_used)" >>"$OUT/memory.log"
python3 "$HERE/summarize.py" "$OUT" | tee "$OUT/summary.txt"
