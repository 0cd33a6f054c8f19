//! How many tokens the KV cache gets, as SGLang sizes its pool: on a GPU, what
//! `--mem-fraction-static` × device memory leaves after the weights, the drafter and a reserve
//! for activations and graphs; on the CPU, the `--cpu-kv-cache-gib` budget. `--max-total-tokens`
//! caps either. The pool is cut into blocks of `BLOCK_TOKENS` (`engine::paged`).
//!
//! The same arithmetic answers preflight's question (does the launch fit?) and the kv-alloc
//! phase's (how many tokens fit?), so both report the same numbers: `tokens_that_fit` and
//! `min_fraction` are what src/preflight/memory.rs uses too.

use crate::finding::{Evidence, Finding, Severity, Side};
use crate::phase::PhaseId;
use crate::spec::LaunchSpec;

/// Tokens per KV block.
pub const BLOCK_TOKENS: usize = 16;
/// The CPU's KV budget without `--cpu-kv-cache-gib`: 299593 tokens of the demo pair (target: 6
/// layers, 2 KV heads of 64, f32; drafter: 1 layer), so its whole 262144-token context fits.
/// The CPU backend's buffers are zeroed lazily by the OS: only positions in use cost memory.
pub const DEFAULT_CPU_KV_GIB: f64 = 2.0;
/// SGLang's default `--mem-fraction-static` when the flag is absent.
pub const DEFAULT_MEM_FRACTION: f64 = 0.85;
/// Activations, workspaces and CUDA graphs, kept out of the KV pool on a GPU.
pub const GPU_RESERVE_BYTES: u64 = 512 << 20;

const GIB: f64 = (1u64 << 30) as f64;

/// The whole tokens of `per_token` bytes that `room` bytes hold (none when there is no room).
pub fn tokens_that_fit(room: f64, per_token: f64) -> u64 {
    if room <= 0.0 || per_token <= 0.0 {
        return 0;
    }
    (room / per_token) as u64
}

/// The smallest `--mem-fraction-static` whose budget holds `fixed` bytes and `tokens` tokens
/// (rounded up to the hundredth, as SGLang prints it); above 1 when nothing would fit.
pub fn min_fraction(memory: f64, fixed: f64, tokens: u64, per_token: f64) -> f64 {
    ((fixed + tokens as f64 * per_token) / memory * 100.0).ceil() / 100.0
}

/// Where the KV pool's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvMemory {
    /// The CPU: a budget in bytes.
    Cpu { budget: u64 },
    /// A GPU after the target loaded: its total and free memory now, and what still has to
    /// fit outside the pool (the drafter's weights and the reserve).
    Gpu { total: u64, free: u64, still_to_load: u64 },
}

/// The KV cache a launch allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvSizing {
    pub tokens: usize,
    pub blocks: usize,
    pub bytes: u64,
}

impl KvSizing {
    /// The kv-alloc phase's line: tokens, blocks and GiB.
    pub fn describe(&self) -> String {
        format!("KV cache: {} tokens in {} blocks of {BLOCK_TOKENS}, {:.2} GiB", self.tokens, self.blocks, self.bytes as f64 / GIB)
    }
}

/// What kv-alloc sizes: the bytes per token (target and drafter), the fewest tokens a launch
/// must hold (one request of the full context and its verify slots) and the memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvRequest {
    pub per_token: u64,
    pub min_tokens: usize,
    pub memory: KvMemory,
}

/// Size the pool, or the `memory-budget` finding of a launch whose pool cannot hold
/// `min_tokens`, with the numbers and the least `--mem-fraction-static` that would fit.
pub fn size(req: &KvRequest, spec: &LaunchSpec) -> Result<KvSizing, Finding> {
    let per_token = req.per_token as f64;
    let fraction = spec.mem_fraction_static.unwrap_or(DEFAULT_MEM_FRACTION);
    let room = match req.memory {
        KvMemory::Cpu { budget } => budget as f64,
        // SGLang: the pool is what stays free after loading, less the (1 - fraction) share
        // of the device that static memory must leave alone.
        KvMemory::Gpu { total, free, still_to_load } => free as f64 - still_to_load as f64 - total as f64 * (1.0 - fraction),
    };
    let mut tokens = tokens_that_fit(room, per_token);
    if let Some(cap) = spec.max_total_tokens {
        tokens = tokens.min(cap);
    }
    let tokens = (tokens as usize) / BLOCK_TOKENS * BLOCK_TOKENS;
    if tokens < req.min_tokens {
        return Err(short_finding(req, spec, tokens, room));
    }
    Ok(KvSizing { tokens, blocks: tokens / BLOCK_TOKENS, bytes: tokens as u64 * req.per_token })
}

fn short_finding(req: &KvRequest, spec: &LaunchSpec, tokens: usize, room: f64) -> Finding {
    let need = req.min_tokens as u64 * req.per_token;
    let launch = |label: &str, value: serde_json::Value| Evidence::new(Side::Launch, "launch flags", label, value);
    let mut f = Finding::new(
        crate::engine::memory::MEMORY_BUDGET,
        Severity::Error,
        PhaseId::KvAlloc,
        format!(
            "the KV cache holds {tokens} tokens ({:.2} GiB free for it at {:.1} KiB per token), fewer than the {} one \
             request of the full context needs ({:.2} GiB)",
            room.max(0.0) / GIB,
            req.per_token as f64 / 1024.0,
            req.min_tokens,
            need as f64 / GIB
        ),
    )
    .with_evidence(Evidence::new(Side::Launch, "KV cache", "tokens that fit", tokens))
    .with_evidence(Evidence::new(Side::Launch, "KV cache", "tokens needed", req.min_tokens))
    .with_evidence(Evidence::new(Side::Launch, "KV cache", "bytes per token", req.per_token));
    if let Some(cap) = spec.max_total_tokens {
        f = f.with_evidence(launch("--max-total-tokens", cap.into()));
    }
    match req.memory {
        KvMemory::Cpu { budget } => f.with_evidence(launch("--cpu-kv-cache-gib", (budget as f64 / GIB).into())),
        KvMemory::Gpu { total, free, still_to_load } => {
            let held = total as f64 - free as f64 + still_to_load as f64;
            let min = min_fraction(total as f64, held, req.min_tokens as u64, req.per_token as f64);
            f.message.push_str(&format!("; the least --mem-fraction-static that fits is {min:.2}"));
            f.with_evidence(launch("--mem-fraction-static", spec.mem_fraction_static.unwrap_or(DEFAULT_MEM_FRACTION).into()))
                .with_evidence(Evidence::new(Side::Launch, "KV cache", "minimum --mem-fraction-static", min))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO_PER_TOKEN: u64 = 6 * 2 * 2 * 64 * 4;

    #[test]
    fn the_cpu_default_holds_more_than_32k_tokens_of_the_demo_target() {
        let req =
            KvRequest { per_token: DEMO_PER_TOKEN, min_tokens: 32768, memory: KvMemory::Cpu { budget: (DEFAULT_CPU_KV_GIB * GIB) as u64 } };
        let s = size(&req, &LaunchSpec::default()).unwrap();
        assert_eq!(s, KvSizing { tokens: 349520, blocks: 21845, bytes: 349520 * DEMO_PER_TOKEN });
        assert_eq!(s.describe(), "KV cache: 349520 tokens in 21845 blocks of 16, 2.00 GiB");
        let capped = size(&req, &LaunchSpec { max_total_tokens: Some(40000), ..Default::default() }).unwrap();
        assert_eq!((capped.tokens, capped.blocks), (40000, 2500));
    }

    #[test]
    fn a_gpu_pool_is_what_the_fraction_leaves_and_a_short_one_names_the_fraction_that_fits() {
        // 100 GiB device, 70 GiB free after the weights, 2 GiB still to load: at 0.85 the pool
        // gets 70 - 2 - 15 = 53 GiB.
        let gpu = KvMemory::Gpu { total: 100 << 30, free: 70 << 30, still_to_load: 2 << 30 };
        let req = KvRequest { per_token: 1 << 20, min_tokens: 1000, memory: gpu };
        assert_eq!(size(&req, &LaunchSpec::default()).unwrap().tokens, 53 * 1024);
        // At 0.35 the room is 70 - 2 - 65 = 3 GiB: 3072 tokens, short of 10000. Held are 30 GiB
        // loaded + 2 to load; with 10000 MiB of KV that is 41.77 GiB of 100, so 0.42.
        let req = KvRequest { min_tokens: 10_000, ..req };
        let f = size(&req, &LaunchSpec { mem_fraction_static: Some(0.35), ..Default::default() }).unwrap_err();
        assert_eq!((f.id.as_str(), f.phase), ("memory-budget", PhaseId::KvAlloc));
        assert!(f.message.ends_with("the least --mem-fraction-static that fits is 0.42"), "{}", f.message);
        assert_eq!(f.evidence[0].value, 3072);
        assert_eq!(f.evidence.last().unwrap().value, 0.42);
    }
}
