//! Hostile and unlucky model files (issue 23, the model layer and preflight): numbers at the
//! edges of every range, headers that lie about their sizes, things that are not regular
//! files where a model file belongs, and the wording of what is reported. Each case must end
//! quickly, without a panic, with an error that names the file (and the key or tensor).

mod gguf_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gguf_support::{s, Writer};
use proptest::prelude::*;
use serde_json::{json, Value};

use specdeck::backend::cpu::CpuBackend;
use specdeck::engine::eagle3::Eagle3Config;
use specdeck::engine::llama::Family;
use specdeck::engine::llama::{Capacity, LlamaConfig, LlamaModel};
use specdeck::engine::weights::Loader;
use specdeck::model::checkpoint::Checkpoint;
use specdeck::model::config::ModelConfig;
use specdeck::model::convert::{convert_gguf, OutDtype};
use specdeck::model::gguf::{parse_header, GgufFile, MAX_METADATA_ELEMENTS};
use specdeck::preflight::check_with_gpus;
use specdeck::preflight::gpu::GpuInventory;
use specdeck::spec::{Algorithm, LaunchSpec};
use specdeck::testkit::{write_tokenizer, TinyEagle3, TinyLlama};

/// Generous for a debug build on a loaded 2-core machine; the hangs this guards against
/// took minutes to hours.
const BOUND: Duration = Duration::from_secs(5);

fn specdeck(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_specdeck"))
        .args(args)
        .env_clear()
        .env("SPECDECK_NVML", "off")
        .output()
        .expect("the specdeck binary runs");
    (out, start.elapsed())
}

/// `check --json`: the findings, the exit code; always within the bound.
fn check_json(args: &[&str]) -> (Vec<Value>, i32) {
    let mut all = vec!["check", "--json"];
    all.extend_from_slice(args);
    let (o, took) = specdeck(&all);
    assert!(took < BOUND, "check took {took:?}");
    let stdout = String::from_utf8(o.stdout).unwrap();
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&o.stderr)));
    (v["findings"].as_array().unwrap().clone(), o.status.code().unwrap())
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn unreadable(findings: &[Value]) -> Vec<&Value> {
    findings.iter().filter(|f| f["id"] == "unreadable-input").collect()
}

/// A config file whose value at `key` is the raw JSON text `raw` (which may be no JSON at all).
fn config_text(config: &Value, key: &str, raw: &str) -> String {
    let mut c = config.clone();
    c[key] = json!("@@RAW@@");
    serde_json::to_string_pretty(&c).unwrap().replace("\"@@RAW@@\"", raw)
}

fn tiny_target(dir: &Path, layers: usize) -> TinyLlama {
    let t = TinyLlama { layers, ..TinyLlama::new(Family::Llama, 7) };
    t.write(dir).unwrap();
    t
}

// ---- arithmetic on untrusted numbers ---------------------------------------------------------

#[test]
fn a_layer_count_past_the_checkpoint_is_refused_by_check_and_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let t = tiny_target(dir.path(), 3);
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, config_text(&t.config(), "num_hidden_layers", "4611686018427387904")).unwrap();

    let (findings, exit) = check_json(&["--model-path", path(dir.path())]);
    assert_eq!(exit, 2);
    let u = unreadable(&findings);
    assert_eq!(u.len(), 1, "{findings:?}");
    assert_eq!(
        u[0]["message"],
        format!(
            "{}: /num_hidden_layers 4611686018427387904 exceeds what this engine loads (the checkpoint holds 3 layers, \
             model.layers.0 to model.layers.2)",
            cfg_path.display()
        )
    );
    assert_eq!(u[0]["evidence"][0]["value"], json!(4611686018427387904u64));

    // The engine's own loader checks before it sizes anything by the count.
    let config = LlamaConfig::from_config(&ModelConfig::load_dir(dir.path()).unwrap()).unwrap();
    let ck = Checkpoint::open(dir.path()).unwrap();
    let b = Arc::new(CpuBackend);
    let mut progress = |_| {};
    let mut ld = Loader::new(&*b, &ck, &mut progress);
    let e = LlamaModel::load(b.clone(), config, &mut ld, Capacity { rows: 4, logit_rows: 4, positions: 16 }).err().unwrap();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: num_hidden_layers 4611686018427387904 exceeds what this engine loads (the checkpoint holds 3 layers under model.layers.)",
            dir.path().display()
        )
    );
}

#[test]
fn numbers_past_u64_are_out_of_range_never_u64_max() {
    let dir = tempfile::tempdir().unwrap();
    let t = tiny_target(dir.path(), 2);
    // 2^66, written as an integer: serde_json reads it as a float.
    std::fs::write(dir.path().join("config.json"), config_text(&t.config(), "max_position_embeddings", "73786976294838206464")).unwrap();
    let (findings, exit) = check_json(&["--model-path", path(dir.path())]);
    assert_eq!(exit, 2);
    let text = serde_json::to_string(&findings).unwrap();
    assert!(!text.contains("18446744073709551615,") && !text.contains(": 18446744073709551615"), "{text}");
    let u = unreadable(&findings);
    assert_eq!(u[0]["evidence"][0]["key"], "/max_position_embeddings");
    let m = u[0]["message"].as_str().unwrap();
    assert!(m.contains("/max_position_embeddings 73786976294838210000 is out of range"), "{m}");
}

#[test]
fn a_shape_message_over_a_hostile_width_shows_the_true_product() {
    let dir = tempfile::tempdir().unwrap();
    let (t_dir, d_dir) = (dir.path().join("t"), dir.path().join("d"));
    let target = TinyLlama::new(Family::Llama, 1);
    let weights = target.write(&t_dir).unwrap();
    TinyEagle3::new(2).write(&d_dir, &target, &weights).unwrap();
    // A target config without weights, 2^64 - 1 wide: three of those are 55340232221128654845.
    std::fs::remove_file(t_dir.join("model.safetensors")).unwrap();
    std::fs::write(t_dir.join("config.json"), config_text(&target.config(), "hidden_size", "18446744073709551615")).unwrap();
    let (findings, _) =
        check_json(&["--model-path", path(&t_dir), "--speculative-draft-model-path", path(&d_dir), "--speculative-algorithm", "EAGLE3"]);
    let fc = findings.iter().find(|f| f["message"].as_str().unwrap().starts_with("fc.weight is")).expect("the fc shape finding");
    assert!(fc["message"].as_str().unwrap().contains("needs [32, 55340232221128654845]"), "{fc}");
}

// ---- bounded work -----------------------------------------------------------------------------

#[test]
fn the_tp_remedy_is_a_divisor_search() {
    let dir = tempfile::tempdir().unwrap();
    // Two primes just under 2^32: its only divisors below 2^32 - 1 are 1 and those two.
    let heads = 4294967291u64 * 4294967279;
    std::fs::write(dir.path().join("config.json"), json!({"model_type": "llama", "num_attention_heads": heads}).to_string()).unwrap();
    let (findings, _) = check_json(&["--model-path", path(dir.path()), "--tp-size", "4294967295"]);
    let tp = findings.iter().find(|f| f["id"] == "tp-divisibility").unwrap();
    assert_eq!(tp["remedies"][0]["changes"][0]["value"], "4294967291", "{tp}");
}

fn llama_gguf(block_count: u32) -> Writer {
    Writer::default()
        .kv("general.architecture", s("llama"))
        .kv("llama.block_count", specdeck::model::gguf::Value::U32(block_count))
        .kv("llama.embedding_length", specdeck::model::gguf::Value::U32(8))
        .kv("llama.feed_forward_length", specdeck::model::gguf::Value::U32(16))
        .kv("llama.attention.head_count", specdeck::model::gguf::Value::U32(2))
        .kv("llama.context_length", specdeck::model::gguf::Value::U32(64))
        .kv("llama.attention.layer_norm_rms_epsilon", specdeck::model::gguf::Value::F32(1e-5))
        .f32_tensor("token_embd.weight", &[4, 8], &[0.5; 32])
        .f32_tensor("blk.0.attn_norm.weight", &[8], &[1.0; 8])
}

#[test]
fn a_gguf_block_count_past_its_tensors_is_refused_before_any_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.gguf");
    llama_gguf(0xFFFF_FFFF).write(&input);
    let start = Instant::now();
    let e = convert_gguf(&input, &dir.path().join("out"), OutDtype::Bf16, &mut |_| {}).err().unwrap().to_string();
    assert!(start.elapsed() < BOUND);
    assert_eq!(
        e,
        format!(
            "{}: llama.block_count = 4294967295: exceeds what this engine loads (the file holds 1 layer of blk.N tensors)",
            input.display()
        )
    );
}

#[test]
fn config_files_past_the_size_cap_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    // Sparse: 65 MiB long, no disk used; the size is refused before anything is read.
    std::fs::File::create(&cfg).unwrap().set_len(65 * 1024 * 1024).unwrap();
    let (findings, exit) = check_json(&["--model-path", path(dir.path())]);
    assert_eq!(exit, 2);
    assert_eq!(
        unreadable(&findings)[0]["message"],
        format!("{}: cannot read: is 68157440 bytes, more than the 64 MiB this file may hold", cfg.display())
    );
}

// ---- files that are not regular files --------------------------------------------------------

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Puts something that is not a regular file at a path.
type MakeEntry = fn(&Path);

#[test]
fn non_regular_model_files_are_named_and_never_block() {
    let root = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, MakeEntry); 5] = [
        ("config.json", "is a FIFO (named pipe), not a regular file", mkfifo),
        ("model.safetensors", "is a directory, not a regular file", |p| std::fs::create_dir(p).unwrap()),
        ("model.safetensors", "is a FIFO (named pipe), not a regular file", mkfifo),
        ("tokenizer.json", "is a dangling symbolic link (to ", |p| std::os::unix::fs::symlink(p.with_extension("gone"), p).unwrap()),
        ("model.safetensors", "is a symbolic link loop", |p| std::os::unix::fs::symlink(p, p).unwrap()),
    ];
    for (i, (name, says, make)) in cases.into_iter().enumerate() {
        let dir = root.path().join(i.to_string());
        tiny_target(&dir, 1);
        std::fs::remove_file(dir.join(name)).unwrap();
        make(&dir.join(name));
        let (findings, exit) = check_json(&["--model-path", path(&dir)]);
        assert_eq!(exit, 2, "{name}: {findings:?}");
        let m = unreadable(&findings)[0]["message"].as_str().unwrap().to_string();
        assert!(m.starts_with(&format!("{}: cannot read: {says}", dir.join(name).display())), "{name}: {m}");
    }
    let gguf = root.path().join("m.gguf");
    mkfifo(&gguf);
    let (o, took) = specdeck(&["convert", "gguf", path(&gguf), path(&root.path().join("out"))]);
    assert!(took < BOUND && !o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains(&format!("{}: cannot read: is a FIFO (named pipe), not a regular file", gguf.display())), "{err}");
}

// ---- validation and wording --------------------------------------------------------------------

#[test]
fn zero_sizes_are_flagged_with_0_in_the_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let t = tiny_target(dir.path(), 2);
    let mut c = t.config();
    c["num_key_value_heads"] = json!(0);
    c["max_position_embeddings"] = json!(0);
    std::fs::write(dir.path().join("config.json"), c.to_string()).unwrap();
    let (findings, exit) = check_json(&["--model-path", path(dir.path())]);
    assert_eq!(exit, 2);
    let keys: Vec<(&Value, &Value)> =
        unreadable(&findings).iter().map(|f| (&f["evidence"][0]["key"], &f["evidence"][0]["value"])).collect();
    assert_eq!(keys, [(&json!("/num_key_value_heads"), &json!(0)), (&json!("/max_position_embeddings"), &json!(0))]);
}

#[test]
fn a_bom_is_accepted_and_nan_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let t = tiny_target(dir.path(), 2);
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, format!("\u{feff}{}", t.config())).unwrap();
    let (findings, exit) = check_json(&["--model-path", path(dir.path())]);
    assert_eq!((exit, unreadable(&findings).len()), (0, 0), "{findings:?}");

    std::fs::write(&cfg, config_text(&t.config(), "rope_theta", "-Infinity")).unwrap();
    let (findings, _) = check_json(&["--model-path", path(dir.path())]);
    let m = unreadable(&findings)[0]["message"].as_str().unwrap().to_string();
    let line = config_text(&t.config(), "rope_theta", "-Infinity").lines().position(|l| l.contains("Infinity")).unwrap() + 1;
    assert!(m.starts_with(&format!("{}: invalid JSON at line {line}, column ", cfg.display())), "{m}");
    assert!(m.ends_with("Infinity is not a number in JSON (JSON has no NaN or Infinity, though Python's json.dump writes them)"), "{m}");
}

/// A safetensors file from a header written by hand (data of `data_len` zero bytes).
fn raw_safetensors(p: &Path, header: &Value, data_len: usize) {
    let mut h = header.to_string().into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.resize(bytes.len() + data_len, 0);
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn safetensors_layout_errors_name_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.safetensors");
    let cases = [
        (
            json!({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 64]}}),
            24,
            "tensor b: data_offsets [8, 64] run past the 24 bytes of tensor data (truncated file?)",
        ),
        (
            json!({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "w": {"dtype": "BF16", "shape": [3], "data_offsets": [8, 16]}}),
            16,
            "tensor w: BF16 of its shape needs 48 bits, but data_offsets [8, 16] hold 8 bytes",
        ),
        (
            json!({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}),
            8,
            "tensor x: data_offsets [4, 8] start at 4, not at 0 where the previous tensor ends (a gap or an overlap)",
        ),
    ];
    for (header, len, says) in cases {
        raw_safetensors(&p, &header, len);
        let e = Checkpoint::open(dir.path()).err().unwrap().to_string();
        assert_eq!(e, format!("{}: invalid safetensors header: {says}", p.display()));
    }
}

#[test]
fn the_tokenizer_mismatch_puts_the_drafters_counts_first() {
    let dir = tempfile::tempdir().unwrap();
    let (t_dir, d_dir) = (dir.path().join("t"), dir.path().join("d"));
    let target = TinyLlama::new(Family::Llama, 1);
    let weights = target.write(&t_dir).unwrap();
    TinyEagle3::new(2).write(&d_dir, &target, &weights).unwrap();
    // Vocabularies of 16 and 12 ids (each with its added special tokens counted again).
    write_tokenizer(&t_dir, 16).unwrap();
    write_tokenizer(&d_dir, 12).unwrap();
    let spec = LaunchSpec {
        model_path: Some(path(&t_dir).into()),
        draft_model_path: Some(path(&d_dir).into()),
        speculative_algorithm: Some(Algorithm::Eagle3),
        ..LaunchSpec::default()
    };
    let findings = check_with_gpus(&spec, &GpuInventory::unknown("tests"));
    let f = findings.iter().find(|f| f.id == "tokenizer-mismatch" && f.message.contains("tokens over")).unwrap();
    assert!(
        f.message.starts_with("The drafter's tokenizer.json has 15 tokens over 12 ids, against the target's 19 tokens over 16 ids."),
        "{}",
        f.message
    );
}

// ---- properties ----------------------------------------------------------------------------------

/// Numbers at the edges, as JSON text (some of it not JSON: NaN, Infinity).
const EDGES: [&str; 16] = [
    "0",
    "1",
    "2147483648",
    "4294967296",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1180591620717411303424",
    "1e308",
    "NaN",
    "Infinity",
    "-1",
    "-9223372036854775809",
    "5e-324",
    "-0.0",
    "2.5",
];

/// Every numeric key `check` and the loaders read, with the side it sits on.
const TARGET_KEYS: [&str; 16] = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "rope_theta",
    "rms_norm_eps",
    "moe_intermediate_size",
    "n_routed_experts",
    "kv_lora_rank",
    "q_lora_rank",
    "eos_token_id",
    "seq_length",
];
const DRAFT_KEYS: [&str; 7] =
    ["hidden_size", "draft_vocab_size", "target_hidden_size", "num_attention_heads", "head_dim", "max_position_embeddings", "vocab_size"];

/// Numbers a config size may take; zero only where the key is optional.
fn valid_size(raw: &str) -> bool {
    matches!(raw, "1" | "2147483648" | "4294967296" | "9223372036854775808" | "18446744073709551615")
}

fn zero(raw: &str) -> bool {
    matches!(raw, "0" | "-0.0")
}

/// Keys that may be 0 (absent features), and keys read only beside another (q_lora_rank
/// with kv_lora_rank) or leniently (token ids): no error is owed for them.
const ZERO_ALLOWED: [&str; 5] = ["moe_intermediate_size", "n_routed_experts", "kv_lora_rank", "draft_vocab_size", "target_hidden_size"];
const NOT_JUDGED: [&str; 4] = ["rope_theta", "rms_norm_eps", "q_lora_rank", "eos_token_id"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn edge_numbers_in_any_config_key(draft_side in any::<bool>(), key in 0usize..16, raw in 0usize..16) {
        let dir = tempfile::tempdir().unwrap();
        let (t_dir, d_dir) = (dir.path().join("t"), dir.path().join("d"));
        let target = TinyLlama { layers: 4, ..TinyLlama::new(Family::Llama, 3) };
        let weights = target.write(&t_dir).unwrap();
        let eagle = TinyEagle3::new(4);
        eagle.write(&d_dir, &target, &weights).unwrap();
        let (dir_of, key, config) = if draft_side {
            (&d_dir, DRAFT_KEYS[key % DRAFT_KEYS.len()], eagle.config(&target))
        } else {
            (&t_dir, TARGET_KEYS[key], target.config())
        };
        let raw = EDGES[raw];
        let file = dir_of.join("config.json");
        std::fs::write(&file, config_text(&config, key, raw)).unwrap();
        let spec = LaunchSpec {
            model_path: Some(path(&t_dir).into()),
            draft_model_path: Some(path(&d_dir).into()),
            speculative_algorithm: Some(Algorithm::Eagle3),
            tp_size: Some(2),
            ..LaunchSpec::default()
        };
        let start = Instant::now();
        let findings = check_with_gpus(&spec, &GpuInventory { count: Some(8), memory_bytes: Some(80 << 30), source: "tests".into() });
        prop_assert!(start.elapsed() < BOUND);
        prop_assert!(
            findings.iter().filter(|f| f.id == "unreadable-input").all(|f| f.message.starts_with(&file.display().to_string())),
            "{findings:?}"
        );
        let owed = !(NOT_JUDGED.contains(&key) || valid_size(raw) || (zero(raw) && ZERO_ALLOWED.contains(&key)));
        if owed {
            let named = findings.iter().any(|f| f.id == "unreadable-input" && f.message.starts_with(&file.display().to_string())
                && (f.message.contains(key) || f.message.contains("invalid JSON")));
            prop_assert!(named, "{key} = {raw}: {findings:?}");
        }
        // The loaders read the same file: a value or an error naming the file, never a panic.
        if let Ok(cfg) = ModelConfig::load_dir(dir_of) {
            let shown = if draft_side { Eagle3Config::from_config(&cfg).err().map(|e| e.to_string()) } else { LlamaConfig::from_config(&cfg).err().map(|e| e.to_string()) };
            if let Some(e) = shown {
                prop_assert!(e.starts_with(&file.display().to_string()), "{e}");
            }
        }
    }

    #[test]
    fn random_gguf_headers_fail_cleanly(
        version in prop::sample::select(vec![2u32, 3, 0x0300_0000]),
        n_tensors in prop::sample::select(vec![0u64, 1, 2, 1 << 31, 1 << 32, 1 << 63, u64::MAX]),
        n_kv in prop::sample::select(vec![0u64, 1, 3, 1 << 32, u64::MAX]),
        tail in prop::collection::vec(any::<u8>(), 0..256),
        cut in 0usize..400,
    ) {
        let mut bytes = llama_gguf(2).to_bytes();
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        bytes[8..16].copy_from_slice(&n_tensors.to_le_bytes());
        bytes[16..24].copy_from_slice(&n_kv.to_le_bytes());
        // Overwrite part of the body with noise, and maybe truncate.
        let at = 24 + cut.min(bytes.len() - 24);
        for (i, b) in tail.iter().enumerate() {
            if let Some(slot) = bytes.get_mut(at + i) { *slot = *b; }
        }
        bytes.truncate(bytes.len().min(24 + cut * 2));
        let file = PathBuf::from("hostile.gguf");
        let start = Instant::now();
        let parsed = parse_header(&file, &bytes);
        prop_assert!(start.elapsed() < BOUND);
        if let Err(e) = parsed {
            prop_assert!(e.to_string().starts_with("hostile.gguf: "), "{e}");
        }
    }

    #[test]
    fn random_gguf_sizes_fail_cleanly_in_convert(
        block_count in prop::sample::select(vec![0u64, 1, 2, 1 << 31, 1 << 32, 1 << 63, u64::MAX]),
        heads in prop::sample::select(vec![0u64, 1, 2, 3, 1 << 32, 1 << 63, u64::MAX]),
        hidden in prop::sample::select(vec![0u64, 8, 1 << 32, u64::MAX]),
        key_length in prop::option::of(prop::sample::select(vec![0u64, 4, 1 << 62, u64::MAX])),
    ) {
        use specdeck::model::gguf::Value as V;
        let mut w = llama_gguf(1);
        w.kv.retain(|(k, _)| !matches!(k.as_str(), "llama.block_count" | "llama.attention.head_count" | "llama.embedding_length"));
        w = w.kv("llama.block_count", V::U64(block_count)).kv("llama.attention.head_count", V::U64(heads)).kv("llama.embedding_length", V::U64(hidden));
        if let Some(k) = key_length { w = w.kv("llama.attention.key_length", V::U64(k)); }
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("m.gguf");
        w.write(&input);
        let start = Instant::now();
        let e = convert_gguf(&input, &dir.path().join("out"), OutDtype::F32, &mut |_| {}).expect_err("no tokenizer: never converts");
        prop_assert!(start.elapsed() < BOUND);
        prop_assert!(e.to_string().starts_with(&input.display().to_string()), "{e}");
    }

    #[test]
    fn random_safetensors_headers_fail_cleanly(
        dtype in prop::sample::select(vec!["F32", "BF16", "I64", "U8", "F8_E4M3", "BOGUS"]),
        dims in prop::collection::vec(prop::sample::select(vec![0u64, 1, 3, 1 << 31, 1 << 32, 1 << 63, u64::MAX]), 0..4),
        start_at in prop::sample::select(vec![0u64, 1, 8, 1 << 63, u64::MAX]),
        end_at in prop::sample::select(vec![0u64, 4, 8, 64, 1 << 63, u64::MAX]),
        data_len in 0usize..128,
        claimed_len in prop::option::of(prop::sample::select(vec![0u64, 7, 1 << 40, u64::MAX])),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        raw_safetensors(&p, &json!({"t": {"dtype": dtype, "shape": dims, "data_offsets": [start_at, end_at]}}), data_len);
        if let Some(n) = claimed_len {
            let mut bytes = std::fs::read(&p).unwrap();
            bytes[..8].copy_from_slice(&n.to_le_bytes());
            std::fs::write(&p, bytes).unwrap();
        }
        let start = Instant::now();
        let opened = Checkpoint::open(dir.path());
        prop_assert!(start.elapsed() < BOUND);
        if let Err(e) = opened {
            prop_assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
        }
    }
}

#[test]
fn an_eagle3_config_of_hostile_widths_is_an_error_not_an_overflow() {
    let target = TinyLlama::new(Family::Llama, 1);
    let mut c = TinyEagle3::new(1).config(&target);
    c["head_dim"] = json!(1u64 << 40);
    c["num_attention_heads"] = json!(1u64 << 30);
    c["num_key_value_heads"] = json!(1u64 << 30);
    let e = Eagle3Config::from_config(&ModelConfig::from_value("d/config.json", c)).err().unwrap().to_string();
    assert!(e.starts_with("d/config.json: /num_attention_heads 1073741824 exceeds what this engine loads: num_attention_heads 1073741824 × head_dim 1099511627776"), "{e}");
}

#[test]
fn a_gguf_that_is_too_short_for_its_tensor_count_is_refused_by_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let mut bytes = llama_gguf(1).to_bytes();
    bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&p, bytes).unwrap();
    let e = GgufFile::open(&p).err().unwrap().to_string();
    assert!(e.starts_with(&format!("{}: truncated: the tensor count (1099511627776 items)", p.display())), "{e}");
}

#[test]
fn gguf_metadata_arrays_are_capped_in_all_not_only_by_the_file_size() {
    // Two u8 arrays that together pass the cap by one: 8 MiB of file, which parsed would
    // have been 256 MiB of values.
    let half = MAX_METADATA_ELEMENTS / 2;
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes()); // version
    bytes.extend(0u64.to_le_bytes()); // tensors
    bytes.extend(2u64.to_le_bytes()); // metadata keys
    for (key, n) in [("a.first", half), ("a.second", half + 1)] {
        bytes.extend((key.len() as u64).to_le_bytes());
        bytes.extend(key.as_bytes());
        bytes.extend(9u32.to_le_bytes()); // an array
        bytes.extend(0u32.to_le_bytes()); // of u8
        bytes.extend((n as u64).to_le_bytes());
        bytes.resize(bytes.len() + n, 1);
    }
    let start = Instant::now();
    let e = parse_header(Path::new("big.gguf"), &bytes).err().unwrap().to_string();
    assert!(start.elapsed() < BOUND);
    assert_eq!(
        e,
        format!(
            "big.gguf: metadata key \"a.second\": an array of {} elements takes the metadata past 8388608 array elements in all",
            half + 1
        )
    );
}

// ---- replay: numbers at the edges in real logs ----------------------------------------------

/// Every number of every shared real log (testdata/real-logs) replaced by one edge value at a
/// time: times, ranks, batch sizes, bars, memory figures, accept lengths, versions. The replay
/// ends, fast, with a summary; never a panic.
#[test]
fn real_logs_with_every_number_at_an_edge_replay_cleanly() {
    let number = regex::Regex::new(r"\d+(\.\d+)?").unwrap();
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/real-logs"));
    let mut logs: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "log")).collect();
    logs.sort();
    assert!(logs.len() >= 30, "{logs:?}");
    let edges = ["0", "18446744073709551616", "99999999999999999999999999999999", "4294967296", "1e400", "0.0000000000000000001"];
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        for edge in edges {
            let hostile = number.replace_all(&text, edge);
            let start = Instant::now();
            let (_, report) = specdeck::replay::replay_bytes("hostile.log", hostile.as_bytes());
            assert!(start.elapsed() < BOUND, "{} with {edge}: {:?}", log.display(), start.elapsed());
            assert_eq!(report.lines as usize, hostile.lines().count(), "{} with {edge}", log.display());
        }
    }
}

/// The demo recording with every number in it (times, byte counts, token ids, accept
/// lengths, GPU figures) at one edge value at a time: each line is an event or a warning, and
/// the console draws what came of it in a replay at both sizes; never a panic.
#[test]
fn the_demo_recording_with_every_number_at_an_edge_replays_and_draws() {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use specdeck::console::app::{Input, Options, ReplaySource, State};
    use specdeck::console::keymap::Keymap;
    use specdeck::console::layout::Layout;
    use specdeck::console::panes;
    use specdeck::console::theme::Theme;

    let number = regex::Regex::new(r"-?\d+(\.\d+)?([eE][-+]?\d+)?").unwrap();
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/demo/recorded-run.jsonl")).unwrap();
    for edge in ["0", "-1", "4294967296", "18446744073709551615", "18446744073709551616", "1e308", "-1e308", "5e-324"] {
        let hostile = number.replace_all(&text, edge);
        let start = Instant::now();
        let (events, report) = specdeck::replay::replay_bytes("edges.jsonl", hostile.as_bytes());
        assert!(start.elapsed() < BOUND, "{edge}: {:?}", start.elapsed());
        assert_eq!(report.lines as usize, hostile.lines().count(), "{edge}");
        let replay = ReplaySource { file: "edges.jsonl".into(), following: false };
        let options = Options { engine_attached: false, replay: Some(replay), ..Options::default() };
        let mut state =
            State::new(LaunchSpec::default(), options, Keymap::default(), Layout::cycle_starting_with(Layout::resolve("wide").unwrap()));
        for (_, ev) in events {
            state.apply(Input::Event(ev));
        }
        for (w, h) in [(80, 24), (200, 60)] {
            let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
            terminal.draw(|f| panes::draw(&state, &Theme::colored(), f)).unwrap();
        }
    }
}

/// An error the engine raises itself about a config number (past a preflight that let it
/// through) cites the number: 0 as 0, never as null, in the finding and its text.
#[test]
fn an_engine_error_about_a_zero_shows_0_in_its_evidence() {
    use specdeck::engine::lifecycle::Engine;
    use specdeck::engine::request::LaunchOutcome;
    use specdeck::event::EventSink;
    use specdeck::finding::{Evidence, Side};
    use specdeck::finding_text::{text, Paint};

    let dir = tempfile::tempdir().unwrap();
    let t = tiny_target(dir.path(), 2);
    let cfg_path = dir.path().join("config.json");
    let mut c = t.config();
    c["num_attention_heads"] = json!(0);
    std::fs::write(&cfg_path, c.to_string()).unwrap();
    let spec = LaunchSpec { model_path: Some(path(dir.path()).into()), device: specdeck::spec::Device::Cpu, ..LaunchSpec::default() };
    let (sink, _rx) = EventSink::channel();
    let mut engine = Engine::new(CpuBackend, sink);
    let LaunchOutcome::Failed(f) = engine.launch(&spec, &|_: &LaunchSpec| Vec::new()) else { panic!("a launch with 0 heads fails") };
    assert_eq!(f.evidence, [Evidence::new(Side::Target, cfg_path.display().to_string(), "/num_attention_heads", json!(0))]);
    assert!(text(&f, Paint { color: false }, None).contains("/num_attention_heads = 0"), "{}", text(&f, Paint { color: false }, None));
}

/// Weight loads of one rank past 255 (the count was a u8) and of thousands of ranks (past the
/// 1024 counted apart), and tracebacks of thousands of processes (past the 256 kept open):
/// each replays to its end.
#[test]
fn replay_counts_of_hostile_size_stay_in_range() {
    let mut log = String::new();
    for i in 0..300 {
        log.push_str(&format!("[2025-09-05 20:48:{:02} TP0] Load weight begin. avail mem=70.00 GB\n", i % 60));
    }
    for i in 0..3000 {
        log.push_str(&format!("[2025-09-05 20:49:00 TP{i}] Load weight begin. avail mem=70.00 GB\n"));
        log.push_str(&format!("(Worker pid={i}) Traceback (most recent call last):\n"));
    }
    let (_, report) = specdeck::replay::replay_bytes("counts.log", log.as_bytes());
    assert_eq!(report.lines, 300 + 2 * 3000);
}
