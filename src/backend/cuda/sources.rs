//! The kernel sources, embedded in the binary so a lone binary can compile them on any
//! GPU machine. Each module is `kernels/common.cuh` followed by one `kernels/*.cu`, with
//! `#line` directives so NVRTC reports errors against the real file and line.

use std::fmt::Write as _;
use std::path::Path;

use crate::backend::kernels::CompileError;
use crate::knobs::Knobs;

/// One `kernels/*.cu` file and the kernels the backend loads from it.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// The repository path, as NVRTC will report it (`kernels/rmsnorm.cu`).
    pub file: &'static str,
    pub text: &'static str,
    pub functions: &'static [&'static str],
}

pub const COMMON_FILE: &str = "kernels/common.cuh";
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");

macro_rules! kernel_source {
    ($name:literal, [$($f:literal),* $(,)?]) => {
        KernelSource {
            file: concat!("kernels/", $name),
            text: include_str!(concat!("../../../kernels/", $name)),
            functions: &[$($f),*],
        }
    };
}

/// attention.cu's entry points: by a lane's share of a head, ceil(head_dim / 32) = 1 .. 8,
/// over contiguous slots, then over a paged pool, one head a block; then blocks of 2 heads
/// (heads of 128), contiguous then paged; last the tiled prefill kernels (on the
/// tensor cores for heads of 64 and 128, else on the CUDA cores).
pub const ATTENTION_KERNELS: [&str; 23] = [
    "attention_f32_p1",
    "attention_f32_p2",
    "attention_f32_p3",
    "attention_f32_p4",
    "attention_f32_p5",
    "attention_f32_p6",
    "attention_f32_p7",
    "attention_f32_p8",
    "paged_attention_f32_p1",
    "paged_attention_f32_p2",
    "paged_attention_f32_p3",
    "paged_attention_f32_p4",
    "paged_attention_f32_p5",
    "paged_attention_f32_p6",
    "paged_attention_f32_p7",
    "paged_attention_f32_p8",
    "attention_f32_p4_g2",
    "paged_attention_f32_p4_g2",
    PREFILL_ATTENTION_KERNEL,
    "prefill_attention_tf32_d64",
    "prefill_attention_tf32_d128",
    "paged_attention_tf32_d64",
    "paged_attention_tf32_d128",
];

pub const PREFILL_ATTENTION_KERNEL: &str = "prefill_attention_f32";

/// The tensor-core prefill kernel for `head_dim`, when there is one.
pub fn prefill_mma_kernel(head_dim: usize) -> Option<&'static str> {
    match head_dim {
        64 => Some(ATTENTION_KERNELS[19]),
        128 => Some(ATTENTION_KERNELS[20]),
        _ => None,
    }
}

/// The tensor-core paged step attention for `head_dim` and the query heads sharing a KV
/// head (at most 16, the rows of an mma tile), when there is one.
pub fn step_mma_kernel(head_dim: usize, heads: usize, kv_heads: usize) -> Option<&'static str> {
    let grouped = kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= 16;
    let kernel = match head_dim {
        64 => ATTENTION_KERNELS[21],
        128 => ATTENTION_KERNELS[22],
        _ => return None,
    };
    grouped.then_some(kernel)
}

/// Query heads one step-attention block may take: 2 where they divide the heads sharing a
/// KV head and a kernel has it (heads 128 wide), else 1. Each head sums the same whatever
/// the count, so this only decides how often a KV row is read.
pub fn heads_per_block(head_dim: usize, heads: usize, kv_heads: usize) -> usize {
    let group = heads / kv_heads.max(1);
    if head_dim == 128 && group % 2 == 0 {
        2
    } else {
        1
    }
}

/// The step-attention kernel for `head_dim` (at most 256) and `heads_per_block`'s count,
/// over a paged pool or contiguous slots.
pub fn attention_kernel(head_dim: usize, heads_per_block: usize, paged: bool) -> &'static str {
    match heads_per_block {
        2 if head_dim == 128 => ATTENTION_KERNELS[16 + usize::from(paged)],
        _ => ATTENTION_KERNELS[usize::from(paged) * 8 + head_dim.div_ceil(32).max(1) - 1],
    }
}

pub const SOURCES: &[KernelSource] = &[
    kernel_source!("embedding.cu", ["embedding_f32"]),
    kernel_source!("rmsnorm.cu", ["rmsnorm_f32"]),
    kernel_source!("rope.cu", ["rope_f32", "rope_store_kv_f32", "split_qkv_f32"]),
    KernelSource { file: "kernels/attention.cu", text: include_str!("../../../kernels/attention.cu"), functions: &ATTENTION_KERNELS },
    kernel_source!(
        "elementwise.cu",
        [
            "silu_mul_f32",
            "silu_mul_stacked_f32",
            "add_f32",
            "add_bias_f32",
            "f32_to_bf16",
            "f32_to_bf16_split",
            "copy_rows_f32",
            "copy_rows_to_bf16",
            "copy_cols_f32",
            "gather_rows_f32",
            "move_rows_f32",
            "store_kv_paged_f32",
            "pick_ids_i32",
            "gather_ids_i32"
        ]
    ),
    kernel_source!("allreduce.cu", ["peer_all_reduce_f32"]),
    kernel_source!(
        "latent.cu",
        [
            "head_matmul_bf16",
            "head_matmul_fp8",
            "mla_store_f32",
            "mla_attention_f32",
            "moe_route_f32",
            "moe_plan_i32",
            "moe_gate_up_bf16",
            "moe_down_bf16",
            "moe_gate_up_fp8",
            "moe_gate_up_int4",
            "moe_down_int4",
            "moe_down_fp8",
            "moe_combine_f32",
            "linear_fp8",
            "dequant_fp8_bf16"
        ]
    ),
    kernel_source!(
        "sampling.cu",
        [
            "topk_chunks_f32",
            "topk_merge_f32",
            "softmax_chunks_f32",
            "softmax_apply_f32",
            "softmax_topk_chunks_f32",
            "softmax_topk_merge_f32",
            "sample_probs_f32"
        ]
    ),
    // The GEMV_ENTRY expansions, as gemm::GEMV_CONFIGS names them, and the GEMV_FP8 ones, as
    // stored::FP8_ENTRIES does (a test checks).
    kernel_source!(
        "gemv.cu",
        [
            "gemv_t1_u2",
            "gemv_gate_up_t1_u2",
            "gemv_rope_t1_u2",
            "gemv_t1_u3",
            "gemv_gate_up_t1_u3",
            "gemv_rope_t1_u3",
            "gemv_t1_u4",
            "gemv_gate_up_t1_u4",
            "gemv_rope_t1_u4",
            "gemv_t2_u2",
            "gemv_gate_up_t2_u2",
            "gemv_rope_t2_u2",
            "gemv_fp8_g1",
            "gemv_fp8_g2",
            "moe_gate_up_fp8_mma",
            "moe_down_fp8_mma"
        ]
    ),
];

impl KernelSource {
    /// The text NVRTC compiles: the common header, then this file, each under its own
    /// `#line` so diagnostics name `kernels/<file>(<line>)`. Files of the same name in
    /// `SPECDECK_KERNEL_DIR` stand in for the embedded ones.
    pub fn program_text(&self) -> Result<String, CompileError> {
        self.program_text_from(Knobs::get().kernel_dir.as_deref())
    }

    /// `program_text` with the stand-in files of `dir`, if any.
    pub fn program_text_from(&self, dir: Option<&Path>) -> Result<String, CompileError> {
        let common = stand_in(dir, COMMON_FILE)?;
        let text = stand_in(dir, self.file)?;
        let (common, text) = (common.as_deref().unwrap_or(COMMON), text.as_deref().unwrap_or(self.text));
        let mut s = String::with_capacity(common.len() + text.len() + 96);
        let _ = writeln!(s, "#line 1 \"{COMMON_FILE}\"");
        s.push_str(common);
        let _ = writeln!(s, "\n#line 1 \"{}\"", self.file);
        s.push_str(text);
        Ok(s)
    }

    /// The module name: the file name without folder and extension.
    pub fn module_name(&self) -> &'static str {
        let base = self.file.rsplit('/').next().unwrap_or(self.file);
        base.strip_suffix(".cu").unwrap_or(base)
    }
}

/// The file of `dir` named as `file` (`kernels/gemv.cu`) is, when there is one.
fn stand_in(dir: Option<&Path>, file: &str) -> Result<Option<String>, CompileError> {
    let Some(dir) = dir else { return Ok(None) };
    let path = dir.join(file.rsplit('/').next().unwrap_or(file));
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CompileError::Nvrtc { file: path.display().to_string(), message: format!("SPECDECK_KERNEL_DIR: {e}") }),
    }
}

/// The source that defines kernel `function`, if any (the tests look kernels up by name).
#[cfg(test)]
pub fn source_of(function: &str) -> Option<&'static KernelSource> {
    SOURCES.iter().find(|s| s.functions.contains(&function))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `extern "C" __global__` kernel in a file is listed for loading, and nothing
    /// else: a kernel added to a .cu without its entry here would never be loaded. The
    /// skinny matmuls are stamped out by gemv.cu's GEMV_ENTRY macro, one per family
    /// (plain, gate-up, rope) and configuration of gemm::GEMV_CONFIGS, and its GEMV_FP8 macro
    /// (stored::FP8_ENTRIES) and MOE_FP8 (stored::FP8_EXPERT_ENTRIES); attention.cu's
    /// ATTENTION_ENTRY stamps a contiguous and a paged kernel per lane share and heads a
    /// block, MMA_ENTRY the tensor-core prefill and step kernels per head width; latent.cu's
    /// MOE_STORED_ENTRIES the gate-up and down kernels of a stored expert format.
    /// What the kernel regex finds inside a macro instead of a kernel's name: gemv.cu's
    /// parameter `NAME`, and `__launch_bounds__` where attention.cu pastes the name
    /// (`attention_f32##NAME`). The stamped names are added from the macros' uses.
    const MACRO_MATCHES: [&str; 2] = ["NAME", "__launch_bounds__"];

    #[test]
    fn listed_functions_match_the_kernel_files() {
        let re = regex::Regex::new(r#"extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\("#).unwrap();
        let entry = regex::Regex::new(r"(?m)^ATTENTION_ENTRY\((\w+),").unwrap();
        let mma = regex::Regex::new(r"(?m)^MMA_ENTRY\((\d+)\)").unwrap();
        let stored = regex::Regex::new(r"(?m)^MOE_STORED_ENTRIES\((\w+),").unwrap();
        for src in SOURCES {
            let mut found: Vec<&str> =
                re.captures_iter(src.text).map(|c| c.get(1).unwrap().as_str()).filter(|n| !MACRO_MATCHES.contains(n)).collect();
            let stamped: Vec<String> =
                entry.captures_iter(src.text).flat_map(|c| ["", "paged_"].map(|kind| format!("{kind}attention_f32{}", &c[1]))).collect();
            found.extend(stamped.iter().map(String::as_str));
            let stamped: Vec<String> = mma
                .captures_iter(src.text)
                .flat_map(|c| ["prefill_attention", "paged_attention"].map(|kind| format!("{kind}_tf32_d{}", &c[1])))
                .collect();
            found.extend(stamped.iter().map(String::as_str));
            let stamped: Vec<String> =
                stored.captures_iter(src.text).flat_map(|c| ["moe_gate_up", "moe_down"].map(|kind| format!("{kind}_{}", &c[1]))).collect();
            found.extend(stamped.iter().map(String::as_str));
            if src.file == "kernels/gemv.cu" {
                found.extend(super::super::gemm::GEMV_CONFIGS.iter().flat_map(|c| [c.plain, c.gate_up, c.rope]));
                found.extend(super::super::stored::FP8_ENTRIES);
                found.extend(super::super::stored::FP8_EXPERT_ENTRIES);
            }
            let mut listed = src.functions.to_vec();
            found.sort();
            listed.sort();
            assert_eq!(found, listed, "{}", src.file);
        }
        assert!(!COMMON.contains("__global__"), "common.cuh must hold helpers only");
    }

    /// Every kernel is launched with programmatic dependent launch allowed, so each must
    /// wait for the previous kernel before it reads what that one wrote: a kernel written
    /// out in a file calls `pdl_enter` or `pdl_wait` in its body (the macro-stamped ones
    /// reach `pdl_wait` through `gemv_tile`, `gemv_fp8_dense`, `moe_fp8_rows`,
    /// `attend_window` and `attend_paged`, which the GPU checks cover, or call `pdl_enter` in
    /// the macro's own body, as MMA_ENTRY's kernels do).
    #[test]
    fn every_written_out_kernel_waits_for_the_one_before() {
        let re = regex::Regex::new(r#"extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\("#).unwrap();
        for src in SOURCES {
            for c in re.captures_iter(src.text).filter(|c| !MACRO_MATCHES.contains(&&c[1])) {
                let body = &src.text[c.get(0).unwrap().end()..];
                let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
                let name = &c[1];
                assert!(
                    body.contains("pdl_enter()") || body.contains("pdl_wait()"),
                    "{}: {name} never waits for the kernel before it",
                    src.file
                );
            }
        }
        for callee in ["gemv_tile", "gemv_fp8_dense", "moe_fp8_rows", "attend_window", "attend_paged"] {
            let src = SOURCES.iter().find(|s| s.text.contains(&format!("void {callee}("))).unwrap();
            let body = &src.text[src.text.find(&format!("void {callee}(")).unwrap()..];
            assert!(body[..body.find("\n}\n").unwrap()].contains("pdl_"), "{callee} never waits");
        }
        let attention = source_of("prefill_attention_tf32_d128").unwrap().text;
        let mma_entry = &attention[attention.find("#define MMA_ENTRY").unwrap()..];
        let mma_entry = &mma_entry[..mma_entry.find("\nMMA_ENTRY(").unwrap()];
        assert_eq!(mma_entry.matches("pdl_enter()").count(), 2, "a kernel of MMA_ENTRY never waits");
    }

    /// Each geometry gets the kernel of its lane share and heads a block, and a geometry no
    /// grouped kernel takes gets one head a block.
    #[test]
    fn step_attention_kernels_by_geometry() {
        // (head_dim, heads, kv_heads) -> (heads a block, contiguous kernel, paged kernel)
        let cases = [
            ((128, 32, 8), (2, "attention_f32_p4_g2", "paged_attention_f32_p4_g2")),
            ((64, 32, 8), (1, "attention_f32_p2", "paged_attention_f32_p2")),
            ((128, 12, 2), (2, "attention_f32_p4_g2", "paged_attention_f32_p4_g2")),
            ((128, 28, 4), (1, "attention_f32_p4", "paged_attention_f32_p4")),
            ((112, 4, 2), (1, "attention_f32_p4", "paged_attention_f32_p4")),
            ((64, 9, 3), (1, "attention_f32_p2", "paged_attention_f32_p2")),
            ((128, 8, 8), (1, "attention_f32_p4", "paged_attention_f32_p4")),
            ((80, 2, 1), (1, "attention_f32_p3", "paged_attention_f32_p3")),
            ((256, 8, 2), (1, "attention_f32_p8", "paged_attention_f32_p8")),
        ];
        for ((head_dim, heads, kv_heads), (per_block, contiguous, paged)) in cases {
            assert_eq!(heads_per_block(head_dim, heads, kv_heads), per_block, "{head_dim} {heads} {kv_heads}");
            assert_eq!(attention_kernel(head_dim, per_block, false), contiguous);
            assert_eq!(attention_kernel(head_dim, per_block, true), paged);
        }
    }

    #[test]
    fn program_text_maps_lines_back_to_the_file() {
        let src = source_of("rope_f32").unwrap();
        assert_eq!(src.module_name(), "rope");
        let text = src.program_text_from(None).unwrap();
        let marker = "#line 1 \"kernels/rope.cu\"\n";
        let at = text.find(marker).expect("line directive for the kernel file");
        // The line after the directive is line 1 of the file itself.
        assert!(text[at + marker.len()..].starts_with(src.text.lines().next().unwrap()));
        assert!(text.starts_with(&format!("#line 1 \"{COMMON_FILE}\"\n{COMMON}")));
        assert!(source_of("no_such_kernel").is_none());
    }

    #[test]
    fn a_kernel_dir_stands_in_for_the_files_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let rope = source_of("rope_f32").unwrap();
        // Only rope.cu is there: common.cuh stays the embedded one.
        std::fs::write(dir.path().join("rope.cu"), "// variant\n").unwrap();
        let text = rope.program_text_from(Some(dir.path())).unwrap();
        assert!(text.starts_with(&format!("#line 1 \"{COMMON_FILE}\"\n{COMMON}")));
        assert!(text.ends_with("#line 1 \"kernels/rope.cu\"\n// variant\n"), "{}", &text[text.len() - 80..]);
        // A file it does not hold is the embedded one.
        let gemv = source_of("gemv_fp8_g1").unwrap();
        assert_eq!(gemv.program_text_from(Some(dir.path())).unwrap(), gemv.program_text_from(None).unwrap());
        // One that cannot be read is an error naming it (a folder where the file should be).
        std::fs::create_dir(dir.path().join("common.cuh")).unwrap();
        let err = rope.program_text_from(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("common.cuh") && err.contains("SPECDECK_KERNEL_DIR"), "{err}");
    }
}
