//! The GPU memory figures a log states, for a replay's GPU pane: SGLang's `avail mem=` (and
//! its capture bar's `avail_mem=`), torch's out-of-memory text (`GPU 0 has a total capacity
//! of 79.10 GiB of which 1.06 GiB is free`), vLLM's `Free memory on device (13.5/79.19 GiB)`
//! and V0's `total_gpu_memory (79.19GiB)`. Each engine prints GiB (SGLang labels them GB).

use std::sync::LazyLock;

use memchr::memmem::Finder;
use regex::Regex;

/// What one line says about one GPU's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryFigures {
    /// The device the text itself names (torch's `GPU 3`); else the line's rank says.
    pub gpu: Option<u32>,
    pub free_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
}

fn bytes(number: &str, unit: &str) -> Option<u64> {
    let scale = match unit {
        "GiB" | "GB" => (1u64 << 30) as f64,
        "MiB" | "MB" => (1u64 << 20) as f64,
        "KiB" | "KB" => 1024.0,
        "bytes" | "B" => 1.0,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then(|| (value * scale).round() as u64)
}

/// The figures of `message`, when it states any.
pub fn figures(message: &str) -> Option<MemoryFigures> {
    // Every form has `mem` in it (`avail mem`, `avail_mem`, `memory`); most lines have none.
    static MEM: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("mem"));
    MEM.find(message.as_bytes())?;
    static FORMS: LazyLock<[Regex; 4]> = LazyLock::new(|| {
        [
            r"avail[ _]mem=(?P<free>[\d.]+) ?(?P<free_unit>GB)",
            r"GPU (?P<gpu>\d+) has a total capacity of (?P<total>[\d.]+) (?P<total_unit>[GMK]iB) of which (?P<free>[\d.]+) (?P<free_unit>[GMK]iB|bytes) is free",
            r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) (?P<total_unit>GiB)\)",
            r"total_gpu_memory \((?P<total>[\d.]+) ?(?P<total_unit>GiB)\)",
        ]
        .map(|form| Regex::new(form).expect("memory forms compile"))
    });
    FORMS.iter().find_map(|form| {
        let caps = form.captures(message)?;
        let total_unit = caps.name("total_unit").map(|u| u.as_str());
        // vLLM's free figure shares the total's unit.
        let free_unit = caps.name("free_unit").map(|u| u.as_str()).or(total_unit);
        let figures = MemoryFigures {
            gpu: caps.name("gpu").and_then(|g| g.as_str().parse().ok()),
            free_bytes: caps.name("free").zip(free_unit).and_then(|(n, u)| bytes(n.as_str(), u)),
            total_bytes: caps.name("total").zip(total_unit).and_then(|(n, u)| bytes(n.as_str(), u)),
        };
        (figures.free_bytes.is_some() || figures.total_bytes.is_some()).then_some(figures)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    fn gib(x: f64) -> Option<u64> {
        Some((x * GIB).round() as u64)
    }

    /// Lines of the real excerpts (testdata/real-logs) and the engines' own wording.
    #[test]
    fn reads_each_engines_memory_figures() {
        let sglang = "Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=6.31 GB, mem usage=1.49 GB.";
        assert_eq!(figures(sglang), Some(MemoryFigures { gpu: None, free_bytes: gib(6.31), total_bytes: None }));
        let graph_end = "Capture cuda graph end. Time elapsed: 12.11 s. mem usage=0.54 GB. avail mem=16.74 GB.";
        assert_eq!(figures(graph_end).unwrap().free_bytes, gib(16.74));
        let bar = "Capturing batches (bs=1 avail_mem=6.91 GB):  50%|██▌  | 1/2 [00:03<00:03,  3.33s/it]";
        assert_eq!(figures(bar).unwrap().free_bytes, gib(6.91));
        let torch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of \
                     79.10 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use.";
        assert_eq!(figures(torch), Some(MemoryFigures { gpu: Some(3), free_bytes: gib(1.06), total_bytes: gib(79.10) }));
        let small = "CUDA out of memory. GPU 0 has a total capacity of 23.64 GiB of which 704.00 MiB is free.";
        assert_eq!(figures(small).unwrap().free_bytes, Some(704 << 20));
        let v1 = "ValueError: Free memory on device (6.92/8.0 GiB) on startup is less than desired GPU memory utilization (0.9, 7.2 GiB).";
        assert_eq!(figures(v1), Some(MemoryFigures { gpu: None, free_bytes: gib(6.92), total_bytes: gib(8.0) }));
        let v0 = "the current vLLM instance can use total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) = 71.27GiB";
        assert_eq!(figures(v0), Some(MemoryFigures { gpu: None, free_bytes: None, total_bytes: gib(79.19) }));
    }

    #[test]
    fn other_memory_lines_state_no_gpu_figures() {
        for line in [
            "Init torch distributed ends. mem usage=0.00 GB",
            "Model loading took 15.43 GiB memory and 32.123456 seconds",
            "Available KV cache memory: 52.31 GiB",
            "Decode batch. #running-req: 1, #token: 2, token usage: 0.00, gen throughput (token/s): 30.00",
            "avail mem=nan GB",
        ] {
            assert_eq!(figures(line), None, "{line}");
        }
    }
}
