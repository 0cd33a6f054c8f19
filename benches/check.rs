//! Wall time of `specdeck check` on the Kimi story pair (Kimi-K2.5 target, Kimi-K2 AQ-MedAI
//! EAGLE-3 drafter), against references measured in the same run:
//!
//! - spawning `/bin/true` (the floor for any command-line tool);
//! - reading the two config.json files (the I/O the check cannot avoid);
//! - `check_spec` in-process (the rules without process start-up).
//!
//! Runs are interleaved, so load from other processes hits every series alike.
//! `cargo bench --bench check` (release profile); `CHECK_BENCH_RUNS` sets the run count.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use specdeck::preflight::check_spec;
use specdeck::spec::{Algorithm, LaunchSpec};

const STORY: &str = "testdata/check/pairs/kimi-k2.5__kimi-k2-aq-medai-eagle3";

fn time(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

struct Series {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Series {
    fn quantile(&mut self, q: f64) -> f64 {
        self.samples.sort();
        let i = ((self.samples.len() - 1) as f64 * q).round() as usize;
        self.samples[i].as_secs_f64() * 1e3
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let runs: usize = std::env::var("CHECK_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let bin = env!("CARGO_BIN_EXE_specdeck");
    let target = root.join(STORY).join("target");
    let draft = root.join(STORY).join("draft");
    let args = [
        "check",
        "--model-path",
        target.to_str().unwrap(),
        "--speculative-draft-model-path",
        draft.to_str().unwrap(),
        "--speculative-algorithm",
        "EAGLE3",
    ];
    let spawn = |program: &str, args: &[&str]| {
        let status = Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
        assert!(status.code().is_some(), "{program} ran");
        status.code().unwrap()
    };
    // The check must find the story's error, or the timing means nothing.
    assert_eq!(spawn(bin, &args), 1, "check finds context-length-exceeds-draft on the story pair");
    let spec = LaunchSpec {
        model_path: Some(target.display().to_string()),
        draft_model_path: Some(draft.display().to_string()),
        speculative_algorithm: Some(Algorithm::Eagle3),
        ..LaunchSpec::default()
    };
    assert!(check_spec(&spec).iter().any(|f| f.id == "context-length-exceeds-draft"));

    let mut series = [
        Series { name: "specdeck check (process)", samples: Vec::new() },
        Series { name: "/bin/true (process)", samples: Vec::new() },
        Series { name: "read both config.json", samples: Vec::new() },
        Series { name: "check_spec (in-process)", samples: Vec::new() },
    ];
    for _ in 0..runs {
        series[0].samples.push(time(|| {
            spawn(bin, &args);
        }));
        series[1].samples.push(time(|| {
            spawn("/bin/true", &[]);
        }));
        series[2].samples.push(time(|| {
            for side in [&target, &draft] {
                std::hint::black_box(std::fs::read(side.join("config.json")).unwrap());
            }
        }));
        series[3].samples.push(time(|| {
            std::hint::black_box(check_spec(&spec));
        }));
    }
    println!("{runs} interleaved runs each; milliseconds");
    println!("{:<28} {:>8} {:>8} {:>8}", "", "p10", "median", "p90");
    let mut medians = Vec::new();
    for s in &mut series {
        let (p10, p50, p90) = (s.quantile(0.1), s.quantile(0.5), s.quantile(0.9));
        println!("{:<28} {p10:>8.3} {p50:>8.3} {p90:>8.3}", s.name);
        medians.push(p50);
    }
    println!(
        "check / spawn(/bin/true) = {:.2}×; check / read = {:.0}×; check process − spawn = {:.3} ms",
        medians[0] / medians[1],
        medians[0] / medians[2],
        medians[0] - medians[1]
    );
}
