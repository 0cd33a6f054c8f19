#!/usr/bin/env bash
# Copy the run's results into $OUT within its limits (8 files, 16 MiB each).
W=/root/work
cp "$W/demo_out/target/model.safetensors" "$OUT/demo_target.safetensors" 2>/dev/null
cp "$W/demo_out/draft/model.safetensors" "$OUT/demo_draft.safetensors" 2>/dev/null
if [ -f "$W/smol_out/draft/model.safetensors" ]; then
    split -b 15M "$W/smol_out/draft/model.safetensors" "$OUT/smol_draft.safetensors.part_"
fi
if [ -f "$W/smol_out/data.npz" ]; then
    split -b 15M "$W/smol_out/data.npz" "$OUT/smol_data.npz.part_"
fi
sha256sum "$W"/demo_out/*/model.safetensors "$W"/smol_out/draft/model.safetensors "$W"/smol_out/data.npz 2>/dev/null \
    | tee "$OUT/sha256.txt"
tar czf "$OUT/results.tgz" -C "$W" --exclude='model.safetensors' --exclude='data.npz' --exclude='code' --exclude='smollm2.gguf*' \
    demo_out smol_out demo.log smol.log 2>/dev/null
ls -la "$OUT"
