//! `specdeck check`: the real binary over the real config pairs of testdata/eagle3-configs
//! (linked into model folders under testdata/check/pairs), the story case, bad inputs, pasted
//! command lines and the JSON shape; and every rule through the library API on tiny model
//! folders whose config.json and model.safetensors the tests write.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::binary::{specdeck, text};
use proptest::prelude::*;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::{json, Value};

use specdeck::finding::{Evidence, Finding, Severity, Side};
use specdeck::preflight::gpu::{from_probe, Gpu, GpuInventory};
use specdeck::preflight::{check_spec, check_with_gpus};
use specdeck::spec::{Algorithm, LaunchSpec, ALLOW_LONGER_CONTEXT_ENV};

const PAIRS: &str = "testdata/check/pairs";
const STORY: &str = "testdata/check/pairs/kimi-k2.5__kimi-k2-aq-medai-eagle3";

// ---------------------------------------------------------------------------------------
// The binary

fn stdout(o: &Output) -> String {
    text(&o.stdout)
}

fn stderr(o: &Output) -> String {
    text(&o.stderr)
}

/// `check --json` on a pair folder, parsed.
fn check_json(args: &[&str], env: &[(&str, &str)]) -> (Value, i32) {
    let mut all = vec!["check", "--json"];
    all.extend_from_slice(args);
    let o = specdeck(&all, env);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)));
    assert_eq!(v["exit"], o.status.code().unwrap(), "the JSON exit field is the process exit");
    (v, o.status.code().unwrap())
}

fn pair_args(pair: &str) -> Vec<String> {
    vec![
        "--model-path".into(),
        format!("{PAIRS}/{pair}/target"),
        "--speculative-draft-model-path".into(),
        format!("{PAIRS}/{pair}/draft"),
        "--speculative-algorithm".into(),
        "EAGLE3".into(),
    ]
}

fn ids_of(v: &Value) -> Vec<(String, String)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap().to_string(), f["severity"].as_str().unwrap().to_string()))
        .collect()
}

fn finding_by_id<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["findings"].as_array().unwrap().iter().find(|f| f["id"] == id).unwrap_or_else(|| panic!("no {id} in {v}"))
}

fn has_evidence(f: &Value, side: &str, key: &str, value: &Value) -> bool {
    f["evidence"].as_array().unwrap().iter().any(|e| e["side"] == side && e["key"] == key && &e["value"] == value)
}

/// (pair, exit, [(id, severity, side, key, value)]): the findings in order, each with one
/// piece of evidence that must be present.
#[allow(clippy::type_complexity)]
fn expected_pairs() -> Vec<(&'static str, i32, Vec<(&'static str, &'static str, &'static str, &'static str, Value)>)> {
    vec![
        (
            "llama3.1-8b-instruct__eagle3",
            1,
            vec![
                ("context-length-exceeds-draft", "error", "draft", "/max_position_embeddings", json!(2048)),
                ("draft-architecture", "error", "draft", "/architectures/0", json!("LlamaForCausalLM")),
                ("dtype-mismatch", "warning", "draft", "/torch_dtype", json!("float16")),
                ("rope-mismatch", "warning", "draft", "/rope_theta", Value::Null),
            ],
        ),
        (
            "llama3.1-8b-instruct__eagle3-specforge",
            1,
            vec![
                ("context-length-exceeds-draft", "error", "draft", "/max_position_embeddings", json!(2048)),
                ("dtype-mismatch", "warning", "draft", "/torch_dtype", json!("float16")),
                ("rope-mismatch", "warning", "target", "/rope_theta", json!(500000.0)),
            ],
        ),
        (
            "llama3.3-70b-instruct__eagle3",
            1,
            vec![("context-length-exceeds-draft", "error", "draft", "/max_position_embeddings", json!(4096))],
        ),
        ("qwen3-8b__eagle3", 0, vec![]),
        (
            "qwen3-30b-a3b__eagle3",
            1,
            vec![
                ("context-length-exceeds-draft", "error", "target", "/max_position_embeddings", json!(40960)),
                ("target-no-capture-support", "warning", "target", "/architectures/0", json!("Qwen3MoeForCausalLM")),
            ],
        ),
        (
            "qwen3-30b-a3b__eagle3.1",
            1,
            vec![
                ("context-length-exceeds-draft", "error", "draft", "/max_position_embeddings", json!(2048)),
                ("draft-architecture", "error", "draft", "/fc_norm", json!(true)),
                ("target-no-capture-support", "warning", "target", "/architectures/0", json!("Qwen3MoeForCausalLM")),
            ],
        ),
        (
            "qwen3-235b-a22b__eagle3",
            0,
            vec![("target-no-capture-support", "warning", "target", "/architectures/0", json!("Qwen3MoeForCausalLM"))],
        ),
        (
            "deepseek-v3__eagle3",
            0,
            vec![
                ("dtype-mismatch", "warning", "target", "/torch_dtype", json!("bfloat16")),
                ("target-no-capture-support", "info", "target", "/architectures/0", json!("DeepseekV3ForCausalLM")),
            ],
        ),
        (
            "gpt-oss-120b__eagle3",
            1,
            vec![
                ("context-length-exceeds-draft", "error", "draft", "/max_position_embeddings", json!(4096)),
                ("target-no-capture-support", "warning", "target", "/architectures/0", json!("GptOssForCausalLM")),
                ("rope-mismatch", "warning", "target", "/rope_theta", json!(150000.0)),
            ],
        ),
        (
            "kimi-k2-instruct__aq-medai-eagle3",
            0,
            vec![
                ("rope-mismatch", "warning", "draft", "/rope_theta", json!(1000000.0)),
                ("target-no-capture-support", "info", "target", "/architectures/0", json!("DeepseekV3ForCausalLM")),
            ],
        ),
        (
            "kimi-k2.5__aq-medai-eagle3",
            0,
            vec![
                ("rope-mismatch", "warning", "target", "/text_config/rope_theta", json!(50000.0)),
                ("target-no-capture-support", "info", "target", "/architectures/0", json!("KimiK25ForConditionalGeneration")),
            ],
        ),
        (
            "kimi-k2.5__k-l-lambda-eagle3-mla",
            1,
            vec![
                ("draft-architecture", "error", "draft", "/architectures/0", json!("Eagle3DeepseekV2ForCausalLM")),
                ("target-no-capture-support", "info", "target", "/architectures/0", json!("KimiK25ForConditionalGeneration")),
            ],
        ),
        (
            "kimi-k2.5__kimi-k2-aq-medai-eagle3",
            1,
            vec![
                ("context-length-exceeds-draft", "error", "draft", "/max_position_embeddings", json!(131072)),
                ("rope-mismatch", "warning", "draft", "/rope_theta", json!(1000000.0)),
                ("target-no-capture-support", "info", "target", "/architectures/0", json!("KimiK25ForConditionalGeneration")),
            ],
        ),
    ]
}

#[test]
fn every_real_pair_gives_its_expected_findings() {
    let expected = expected_pairs();
    let listed: Vec<String> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(PAIRS))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed.len(), expected.len(), "every pair folder has an expectation: {listed:?}");
    for (pair, exit, findings) in expected {
        let args = pair_args(pair);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (v, code) = check_json(&args, &[]);
        let want: Vec<(String, String)> = findings.iter().map(|f| (f.0.to_string(), f.1.to_string())).collect();
        assert_eq!(ids_of(&v), want, "{pair}");
        assert_eq!(code, exit, "{pair}");
        for (id, _, side, key, value) in &findings {
            assert!(has_evidence(finding_by_id(&v, id), side, key, value), "{pair}: {id} lacks {side} {key} = {value}: {v}");
        }
    }
}

#[test]
fn story_case_is_an_error_with_both_remedies() {
    let args = pair_args("kimi-k2.5__kimi-k2-aq-medai-eagle3");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (v, code) = check_json(&args, &[]);
    assert_eq!(code, 1);
    let f = finding_by_id(&v, "context-length-exceeds-draft");
    assert_eq!(f["severity"], "error");
    assert_eq!(f["phase"], "drafter-init");
    assert_eq!(
        f["evidence"][0],
        json!({"side": "target", "file": format!("{STORY}/target/config.json"), "key": "/text_config/max_position_embeddings", "value": 262144})
    );
    assert_eq!(
        f["evidence"][1],
        json!({"side": "draft", "file": format!("{STORY}/draft/config.json"), "key": "/max_position_embeddings", "value": 131072})
    );
    let remedies: Vec<&str> = f["remedies"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(remedies, ["clamp-context-length", "allow-longer-context"]);
    assert_eq!(f["remedies"][0]["changes"], json!([{"op": "set-flag", "flag": "--context-length", "value": "131072"}]));
    assert_eq!(
        f["remedies"][1]["changes"],
        json!([
            {"op": "set-env", "name": ALLOW_LONGER_CONTEXT_ENV, "value": "1"},
            {"op": "override-draft-config", "key": "/max_position_embeddings", "value": 262144}
        ])
    );
}

#[test]
fn story_case_exits_0_after_either_fix() {
    let base = pair_args("kimi-k2.5__kimi-k2-aq-medai-eagle3");
    let mut clamp: Vec<&str> = base.iter().map(String::as_str).collect();
    clamp.extend(["--apply", "clamp-context-length"]);
    let (v, code) = check_json(&clamp, &[]);
    assert_eq!(code, 0, "{v}");
    assert!(!ids_of(&v).iter().any(|(id, _)| id == "context-length-exceeds-draft"));

    let plain: Vec<&str> = base.iter().map(String::as_str).collect();
    let (v, code) = check_json(&plain, &[(ALLOW_LONGER_CONTEXT_ENV, "1")]);
    assert_eq!(code, 0, "{v}");
    let f = finding_by_id(&v, "context-length-exceeds-draft");
    assert_eq!(f["severity"], "warning");
    assert!(has_evidence(f, "launch", ALLOW_LONGER_CONTEXT_ENV, &json!("1")));

    let mut allow = plain.clone();
    allow.extend(["--apply", "allow-longer-context"]);
    let o = specdeck(&[&["check", "--json"][..], &allow].concat(), &[]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stderr(&o),
        "specdeck check: applied allow-longer-context: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, draft config \
         /max_position_embeddings = 262144 (in memory)\n"
    );
}

#[test]
fn story_case_text_output() {
    let mut args = vec!["check"];
    let pair = pair_args("kimi-k2.5__kimi-k2-aq-medai-eagle3");
    args.extend(pair.iter().map(String::as_str));
    let o = specdeck(&args, &[]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(!text.contains('\u{1b}'), "no ANSI when stdout is not a terminal");
    insta::assert_snapshot!("story_text", text);

    args.extend(["--apply", "clamp-context-length"]);
    let o = specdeck(&args, &[]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(text.contains("  applied clamp-context-length: --context-length 131072\n"), "{text}");
    assert!(text.ends_with("0 errors, 1 warning, 1 note: exit 0\n"), "{text}");
}

#[test]
fn json_has_exactly_the_documented_shape() {
    let mut args: Vec<String> = pair_args("llama3.1-8b-instruct__eagle3");
    args.extend(["--tp-size".into(), "3".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (v, _) = check_json(&args, &[]);
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&v), ["findings", "not_checked", "fixed_command", "exit"]);
    let findings = v["findings"].as_array().unwrap();
    assert!(findings.len() >= 5);
    let mut remedies = 0;
    for f in findings {
        assert_eq!(keys(f), ["id", "severity", "phase", "message", "evidence", "remedies"]);
        for e in f["evidence"].as_array().unwrap() {
            assert_eq!(keys(e), ["side", "file", "key", "value"]);
        }
        for r in f["remedies"].as_array().unwrap() {
            assert_eq!(keys(r), ["id", "key", "description", "changes"]);
            remedies += 1;
        }
    }
    assert!(remedies >= 4, "{v}");
}

#[test]
fn unknown_apply_id_exits_2_and_lists_the_available_ones() {
    let mut args = vec!["check".to_string()];
    args.extend(pair_args("kimi-k2.5__kimi-k2-aq-medai-eagle3"));
    // A remedy id of the engine's that no finding of this check offers (tests/cli.rs covers
    // an id no remedy has).
    args.extend(["--apply".into(), "use-cpu-device".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = specdeck(&args, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "specdeck check: --apply use-cpu-device: no current finding offers this remedy; available: \
         clamp-context-length, allow-longer-context\n"
    );
    assert_eq!(stdout(&o), "");
}

#[test]
fn pasted_command_line_with_env_assignments() {
    let line = format!(
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python3 -m sglang.launch_server --model-path {STORY}/target \
         --speculative-algorithm EAGLE3 --speculative-draft-model-path {STORY}/draft --tp 8 --trust-remote-code \
         --host 0.0.0.0"
    );
    let words: Vec<&str> = line.split_whitespace().collect();
    let (v, code) = check_json(&[&["--"][..], &words].concat(), &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(finding_by_id(&v, "context-length-exceeds-draft")["severity"], "warning");
    let tp = finding_by_id(&v, "tp-divisibility");
    assert_eq!(tp["severity"], "info");
    assert!(tp["message"].as_str().unwrap().contains("--tp-size 8 was not checked against the GPUs present"), "{tp}");
    assert!(has_evidence(tp, "launch", "--tp-size", &json!(8)));
}

#[test]
fn pasted_env_typo_is_flagged_and_fixed_by_apply() {
    let line = format!(
        "SGLANG_ALLLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python3 -m sglang.launch_server --model-path {STORY}/target \
         --speculative-algorithm EAGLE3 --speculative-draft-model-path {STORY}/draft"
    );
    let words: Vec<&str> = line.split_whitespace().collect();
    let (v, code) = check_json(&[&["--"][..], &words].concat(), &[]);
    assert_eq!(code, 1);
    let typo = finding_by_id(&v, "env-typo");
    assert_eq!(typo["severity"], "warning");
    assert!(has_evidence(typo, "launch", "SGLANG_ALLLOW_OVERWRITE_LONGER_CONTEXT_LEN", &json!("1")));
    assert_eq!(
        typo["remedies"][0]["changes"],
        json!([
            {"op": "set-env", "name": ALLOW_LONGER_CONTEXT_ENV, "value": "1"},
            {"op": "unset-env", "name": "SGLANG_ALLLOW_OVERWRITE_LONGER_CONTEXT_LEN"}
        ])
    );
    assert_eq!(finding_by_id(&v, "context-length-exceeds-draft")["severity"], "error");
    let (v, code) = check_json(&[&["--apply", "fix-env-typo", "--"][..], &words].concat(), &[]);
    assert_eq!(code, 0, "{v}");
    assert!(!ids_of(&v).iter().any(|(id, _)| id == "env-typo"));
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[test]
fn a_quantization_flag_against_the_checkpoints_is_sglangs_error_until_removed() {
    let pair = format!("{PAIRS}/deepseek-v3__eagle3");
    let line = format!(
        "python3 -m sglang.launch_server --model-path {pair}/target --speculative-algorithm EAGLE3 \
         --speculative-draft-model-path {pair}/draft --quantization awq --served-model-name dsv3"
    );
    let (v, code) = check_json(&[&["--"][..], &words(&line)].concat(), &[]);
    assert_eq!(code, 1, "{v}");
    let want = [
        ("quantization-mismatch", "error"),
        ("dtype-mismatch", "warning"),
        ("quantization-mismatch", "warning"),
        ("target-no-capture-support", "info"),
    ];
    assert_eq!(ids_of(&v), want.map(|(id, s)| (id.to_string(), s.to_string())));
    let error = &v["findings"][0];
    assert_eq!(
        error["message"],
        "Quantization method specified in the model config (fp8) does not match the quantization method specified in the \
         `quantization` argument (awq)."
    );
    assert!(has_evidence(error, "target", "/quantization_config/quant_method", &json!("fp8")), "{error}");
    assert!(has_evidence(error, "launch", "--quantization", &json!("awq")), "{error}");
    assert_eq!(error["remedies"][0]["changes"], json!([{"op": "unset-flag", "flag": "--quantization"}]));
    // The bf16 drafter would load as awq too.
    let draft = &v["findings"][2];
    assert!(has_evidence(draft, "draft", "/quantization_config", &Value::Null), "{draft}");
    assert_eq!(draft["remedies"][0]["id"], "set-draft-quantization-unquant");
    // The flags the rules now read are no longer listed as not checked.
    assert_eq!(v["not_checked"], json!([{"flag": "--served-model-name", "value": "dsv3"}]));

    // Without the flag the checkpoint's fp8 decides, which quantizes the drafter as it loads.
    let (v, code) = check_json(&[&["--apply", "unset-quantization", "--"][..], &words(&line)].concat(), &[]);
    assert_eq!(code, 0, "{v}");
    assert!(!ids_of(&v).iter().any(|(id, _)| id == "quantization-mismatch"), "{v}");
    assert_eq!(v["fixed_command"], line.replace(" --quantization awq", ""));
}

#[test]
fn kimi_with_an_mla_backend_and_uneven_ep_and_dp_groups_is_fixed_on_three_flags() {
    let pair = format!("{PAIRS}/kimi-k2.5__aq-medai-eagle3");
    let line = format!(
        "python3 -m sglang.launch_server --model-path {pair}/target --speculative-algorithm EAGLE3 \
         --speculative-draft-model-path {pair}/draft --tp 8 --ep 3 --dp 3 --enable-dp-attention --attention-backend trtllm_mla"
    );
    let (v, code) = check_json(&[&["--"][..], &words(&line)].concat(), &[]);
    assert_eq!(code, 1, "{v}");
    let want = [
        ("draft-attention-backend", "error"),
        ("tp-divisibility", "error"),
        ("tp-divisibility", "error"),
        ("rope-mismatch", "warning"),
        ("target-no-capture-support", "info"),
        ("tp-divisibility", "info"),
    ];
    assert_eq!(ids_of(&v), want.map(|(id, s)| (id.to_string(), s.to_string())));
    let backend = &v["findings"][0];
    assert!(backend["message"].as_str().unwrap().starts_with("trtllm_mla backend requires MLA model (use_mla_backend=True)."), "{backend}");
    assert!(has_evidence(backend, "draft", "/kv_lora_rank", &Value::Null), "{backend}");
    assert!(has_evidence(backend, "draft", "/architectures/0", &json!("LlamaForCausalLMEagle3")), "{backend}");
    assert!(has_evidence(backend, "launch", "--attention-backend", &json!("trtllm_mla")), "{backend}");
    let ep = &v["findings"][1];
    assert_eq!(ep["message"], "tp_size 8 must be divisible by ep_size 3: the expert-parallel groups split the tensor-parallel ranks.");
    assert!(has_evidence(ep, "target", "/text_config/n_routed_experts", &json!(384)), "{ep}");
    assert!(v["findings"][2]["message"].as_str().unwrap().starts_with("tp_size must be divisible by attn_dp_size"), "{v}");
    // With DP attention the DP ranks add no GPU: the count to check is --tp-size's.
    assert!(v["findings"][5]["message"].as_str().unwrap().starts_with("--tp-size 8 was not checked"), "{v}");

    let fixes = ["--apply", "draft-attention-backend-flashinfer", "--apply", "fit-ep-size", "--apply", "fit-dp-size", "--"];
    let (v, code) = check_json(&[&fixes[..], &words(&line)].concat(), &[]);
    assert_eq!(code, 0, "{v}");
    assert!(!ids_of(&v).iter().any(|(id, s)| id == "draft-attention-backend" || s == "error"), "{v}");
    let fixed = line.replace("--ep 3 --dp 3", "--ep 4 --dp 2") + " --speculative-draft-attention-backend flashinfer";
    assert_eq!(v["fixed_command"], fixed);
}

// ---------------------------------------------------------------------------------------
// Bad inputs: exit 2, the file named, no panic

/// Write a model folder: config.json (raw text) and, optionally, model.safetensors.
fn folder(config: Option<&str>, tensors: &[(&str, Dtype, Vec<usize>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if let Some(text) = config {
        std::fs::write(dir.path().join("config.json"), text).unwrap();
    }
    if !tensors.is_empty() {
        write_safetensors(&dir.path().join("model.safetensors"), tensors);
    }
    dir
}

fn write_safetensors(path: &Path, tensors: &[(&str, Dtype, Vec<usize>)]) {
    let data: Vec<Vec<u8>> = tensors.iter().map(|(_, d, s)| vec![0u8; s.iter().product::<usize>() * d.bitsize() / 8]).collect();
    let views: Vec<(String, TensorView)> =
        tensors.iter().zip(&data).map(|((n, d, s), bytes)| (n.to_string(), TensorView::new(*d, s.clone(), bytes).unwrap())).collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn check_dirs(target: &Path, draft: Option<&Path>) -> Output {
    let t = target.to_str().unwrap().to_string();
    let mut args = vec!["check".to_string(), "--model-path".into(), t, "--speculative-algorithm".into(), "EAGLE3".into()];
    if let Some(d) = draft {
        args.extend(["--speculative-draft-model-path".into(), d.to_str().unwrap().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    specdeck(&args, &[])
}

/// Exit 2, an `unreadable-input` finding, and the reason with the file's path in the output.
fn assert_unreadable(o: &Output, path: &Path, reason: &str) {
    let out = stdout(o);
    assert_eq!(o.status.code(), Some(2), "{out}{}", stderr(o));
    assert!(out.contains("error[unreadable-input]"), "{out}");
    // The message is word-wrapped: compare with all whitespace runs as one space.
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let named = flat(&format!("{}: {reason}", path.display()));
    assert!(flat(&out).contains(&named), "{named:?} not in:\n{out}");
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

fn good_target() -> String {
    tiny_target().to_string()
}

#[test]
fn missing_folder_and_missing_config() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-model");
    assert_unreadable(&check_dirs(&missing, None), &missing, "no such folder");

    let empty = folder(None, &[]);
    let o = check_dirs(empty.path(), None);
    assert_unreadable(&o, &empty.path().join("config.json"), "cannot read: No such file or directory");

    let t = folder(Some(&good_target()), &[]);
    let file = t.path().join("config.json");
    assert_unreadable(&check_dirs(&file, None), &file, "is a file, not a model folder");
}

#[test]
fn bad_json_names_line_and_column() {
    let t = folder(Some(&good_target()), &[]);
    let d = folder(Some("{\n  \"hidden_size\": 64,\n  \"vocab_size\": ,\n}"), &[]);
    let o = check_dirs(t.path(), Some(d.path()));
    assert_unreadable(&o, &d.path().join("config.json"), "invalid JSON at line 3, column 17");
    let d = folder(Some("[1, 2]"), &[]);
    assert_unreadable(&check_dirs(t.path(), Some(d.path())), &d.path().join("config.json"), "the top level is not a JSON object");
}

#[test]
fn a_value_of_the_wrong_type_names_the_key() {
    let mut cfg = tiny_target();
    cfg["hidden_size"] = json!("big");
    let t = folder(Some(&cfg.to_string()), &[]);
    let d = folder(Some(&tiny_drafter().to_string()), &[]);
    let o = check_dirs(t.path(), Some(d.path()));
    assert_unreadable(&o, &t.path().join("config.json"), "/hidden_size = \"big\" is not a non-negative integer");
    let f = check_with_gpus(
        &LaunchSpec {
            model_path: Some(t.path().display().to_string()),
            draft_model_path: Some(d.path().display().to_string()),
            ..LaunchSpec::default()
        },
        &one_80g_gpu(),
    );
    // Reported once, first, with the offending value, though several rules read the key.
    assert_eq!(f.iter().filter(|f| f.id == "unreadable-input").count(), 1);
    assert_eq!(f[0].evidence, [Evidence::new(Side::Target, t.path().join("config.json").display().to_string(), "/hidden_size", "big")]);
}

#[test]
fn truncated_and_invalid_safetensors_headers() {
    let t = folder(Some(&good_target()), &[]);
    let d = folder(Some(&tiny_drafter().to_string()), &drafter_tensors());
    let st = d.path().join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() - 7]).unwrap();
    assert_unreadable(&check_dirs(t.path(), Some(d.path())), &st, "invalid safetensors header: tensor data does not match the file length");
    std::fs::write(&st, &bytes[..40]).unwrap();
    assert_unreadable(&check_dirs(t.path(), Some(d.path())), &st, "invalid safetensors header: the header length runs past the end");
    std::fs::write(&st, [7u8, 0, 0]).unwrap();
    assert_unreadable(&check_dirs(t.path(), Some(d.path())), &st, "invalid safetensors header: file is 3 bytes, too short for a header");
    let mut garbage = 16u64.to_le_bytes().to_vec();
    garbage.extend_from_slice(b"not json at all!");
    std::fs::write(&st, garbage).unwrap();
    assert_unreadable(&check_dirs(t.path(), Some(d.path())), &st, "invalid safetensors header");
}

#[test]
fn bad_index_names_the_index() {
    let t = folder(Some(&good_target()), &[]);
    let d = folder(Some(&tiny_drafter().to_string()), &drafter_tensors());
    let index = d.path().join("model.safetensors.index.json");
    std::fs::write(&index, r#"{"weight_map": {"fc.weight": "model.safetensors", "ghost": "model.safetensors"}}"#).unwrap();
    assert_unreadable(
        &check_dirs(t.path(), Some(d.path())),
        &index,
        "invalid index: ghost is mapped to model.safetensors but that file has no such tensor",
    );
    std::fs::write(&index, r#"{"metadata": {}}"#).unwrap();
    assert_unreadable(&check_dirs(t.path(), Some(d.path())), &index, "invalid index: no \"weight_map\" object");
}

#[test]
fn bad_tokenizer_json_is_unreadable_when_compared() {
    let t = folder(Some(&good_target()), &[]);
    let d = folder(Some(&tiny_drafter().to_string()), &[]);
    std::fs::write(t.path().join("tokenizer.json"), tokenizer_json(&["a", "b"])).unwrap();
    std::fs::write(d.path().join("tokenizer.json"), "{\"model\": {\"vocab\": [}").unwrap();
    let o = check_dirs(t.path(), Some(d.path()));
    assert_unreadable(&o, &d.path().join("tokenizer.json"), "invalid JSON at line 1, column");
}

#[test]
fn a_missing_model_path_is_unreadable_input() {
    let (v, code) = check_json(&[], &[]);
    assert_eq!(code, 2);
    let f = finding_by_id(&v, "unreadable-input");
    assert_eq!(f["message"], "--model-path is required: it names the target model folder");
    assert_eq!(f["evidence"][0]["side"], "launch");
}

// ---------------------------------------------------------------------------------------
// Every rule through the library API, on tiny real folders

fn tiny_target() -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 2048,
        "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": false
    })
}

fn tiny_drafter() -> Value {
    json!({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 256, "draft_vocab_size": 32, "max_position_embeddings": 2048,
        "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": false
    })
}

fn drafter_tensors() -> Vec<(&'static str, Dtype, Vec<usize>)> {
    vec![
        ("fc.weight", Dtype::BF16, vec![64, 192]),
        ("midlayer.self_attn.q_proj.weight", Dtype::BF16, vec![64, 128]),
        ("lm_head.weight", Dtype::BF16, vec![32, 64]),
        ("d2t", Dtype::I64, vec![32]),
        ("t2d", Dtype::BOOL, vec![256]),
    ]
}

fn tokenizer_json(tokens: &[&str]) -> String {
    let vocab: serde_json::Map<String, Value> = tokens.iter().enumerate().map(|(i, t)| (t.to_string(), json!(i))).collect();
    json!({"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": vocab, "merges": []}}).to_string()
}

/// A target and drafter written to disk, checked with a known GPU inventory.
struct Pair {
    target: tempfile::TempDir,
    draft: tempfile::TempDir,
    spec: LaunchSpec,
}

impl Pair {
    fn new(target: Value, draft: Value, tensors: &[(&str, Dtype, Vec<usize>)]) -> Pair {
        let target = folder(Some(&target.to_string()), &[]);
        let draft = folder(Some(&draft.to_string()), tensors);
        let spec = LaunchSpec {
            model_path: Some(target.path().display().to_string()),
            draft_model_path: Some(draft.path().display().to_string()),
            speculative_algorithm: Some(Algorithm::Eagle3),
            ..LaunchSpec::default()
        };
        Pair { target, draft, spec }
    }

    fn tiny() -> Pair {
        Pair::new(tiny_target(), tiny_drafter(), &drafter_tensors())
    }

    fn check(&self) -> Vec<Finding> {
        check_with_gpus(&self.spec, &one_80g_gpu())
    }

    fn draft_file(&self, name: &str) -> String {
        self.draft.path().join(name).display().to_string()
    }

    fn target_file(&self, name: &str) -> String {
        self.target.path().join(name).display().to_string()
    }
}

fn one_80g_gpu() -> GpuInventory {
    from_probe(&LaunchSpec::default(), &Ok(vec![Gpu { name: "test GPU".into(), memory_bytes: 80 << 30 }]), None)
}

fn ids(findings: &[Finding]) -> Vec<(&str, Severity)> {
    findings.iter().map(|f| (f.id.as_str(), f.severity)).collect()
}

/// Apply a remedy the way `--apply` does: from the current findings.
fn apply(spec: &mut LaunchSpec, findings: &[Finding], id: &str) {
    let r = findings.iter().find_map(|f| f.remedy(id)).unwrap_or_else(|| panic!("no remedy {id}"));
    spec.apply_remedy(id, &r.changes).unwrap();
}

#[test]
fn a_consistent_tiny_pair_has_no_findings() {
    assert_eq!(ids(&Pair::tiny().check()), []);
}

#[test]
fn fc_weight_of_the_wrong_width_is_a_hidden_size_mismatch() {
    let mut tensors = drafter_tensors();
    tensors[0].2 = vec![64, 128];
    let p = Pair::new(tiny_target(), tiny_drafter(), &tensors);
    let f = p.check();
    assert_eq!(ids(&f), [("hidden-size-mismatch", Severity::Error)]);
    assert_eq!(f[0].evidence[0], Evidence::new(Side::Draft, p.draft_file("model.safetensors"), "fc.weight", json!([64, 128])));
    assert_eq!(f[0].evidence[1], Evidence::new(Side::Target, p.target_file("config.json"), "/hidden_size", 64));
}

#[test]
fn target_hidden_size_is_what_the_drafter_consumes() {
    let mut draft = tiny_drafter();
    draft["target_hidden_size"] = json!(96);
    let p = Pair::new(tiny_target(), draft, &[]);
    let f = p.check();
    assert_eq!(ids(&f), [("hidden-size-mismatch", Severity::Error)]);
    assert_eq!(f[0].evidence[1], Evidence::new(Side::Draft, p.draft_file("config.json"), "/target_hidden_size", 96));
}

#[test]
fn aux_layer_ids_past_the_target_are_out_of_range() {
    let mut draft = tiny_drafter();
    draft["eagle_config"] = json!({"eagle_aux_hidden_state_layer_ids": [0, 1, 3]});
    let p = Pair::new(tiny_target(), draft, &drafter_tensors());
    let f = p.check();
    assert_eq!(ids(&f), [("aux-layer-out-of-range", Severity::Error)]);
    assert!(f[0].message.starts_with("The drafter reads the inputs of target layers [1, 2, 4]"), "{}", f[0].message);
    assert_eq!(
        f[0].evidence[0],
        Evidence::new(Side::Draft, p.draft_file("config.json"), "/eagle_config/eagle_aux_hidden_state_layer_ids", json!([0, 1, 3]))
    );
    assert_eq!(f[0].evidence[1], Evidence::new(Side::Target, p.target_file("config.json"), "/num_hidden_layers", 4));
    // SGLang's default for a 2-layer target, [2, 1, -1], reaches outside too.
    let mut target = tiny_target();
    target["num_hidden_layers"] = json!(2);
    let f = Pair::new(target, tiny_drafter(), &drafter_tensors()).check();
    assert_eq!(ids(&f), [("aux-layer-out-of-range", Severity::Error)]);
    assert!(f[0].message.contains("[2, 1, -1] (SGLang's default [2, L/2, L-3] for L = 2)"), "{}", f[0].message);
}

#[test]
fn vocab_sizes_must_match() {
    let mut draft = tiny_drafter();
    draft["vocab_size"] = json!(300);
    let p = Pair::new(tiny_target(), draft, &drafter_tensors());
    let f = p.check();
    assert_eq!(ids(&f), [("vocab-mismatch", Severity::Error)]);
    assert_eq!(f[0].evidence[1], Evidence::new(Side::Draft, p.draft_file("config.json"), "/vocab_size", 300));
}

#[test]
fn d2t_and_lm_head_must_have_draft_vocab_size_rows() {
    let mut tensors = drafter_tensors();
    tensors[2].2 = vec![48, 64];
    tensors[3].2 = vec![40];
    let p = Pair::new(tiny_target(), tiny_drafter(), &tensors);
    let f = p.check();
    assert_eq!(ids(&f), [("draft-vocab-map", Severity::Error), ("draft-vocab-map", Severity::Error)]);
    assert_eq!(f[0].evidence[1], Evidence::new(Side::Draft, p.draft_file("model.safetensors"), "d2t", json!([40])));
    assert_eq!(f[1].evidence[1], Evidence::new(Side::Draft, p.draft_file("model.safetensors"), "lm_head.weight", json!([48, 64])));
    // No d2t at all while the draft vocab is reduced.
    let tensors: Vec<_> = drafter_tensors().into_iter().filter(|t| t.0 != "d2t").collect();
    let f = Pair::new(tiny_target(), tiny_drafter(), &tensors).check();
    assert_eq!(ids(&f), [("draft-vocab-map", Severity::Error)]);
    assert!(f[0].message.contains("the weights have no d2t"), "{}", f[0].message);
}

#[test]
fn a_tied_lm_head_with_a_reduced_vocab_is_untied_by_its_remedy() {
    let mut draft = tiny_drafter();
    draft["tie_word_embeddings"] = json!(true);
    let mut p = Pair::new(tiny_target(), draft, &drafter_tensors());
    let f = p.check();
    assert_eq!(ids(&f), [("draft-vocab-map", Severity::Error)]);
    assert_eq!(f[0].phase.name(), "draft-graph-capture");
    apply(&mut p.spec, &f, "untie-draft-lm-head");
    assert_eq!(ids(&p.check()), []);
}

#[test]
fn an_eagle3_drafter_published_as_llama_is_found_by_its_fc_and_renamed() {
    let mut draft = tiny_drafter();
    draft["architectures"] = json!(["LlamaForCausalLM"]);
    draft.as_object_mut().unwrap().remove("draft_vocab_size");
    let tensors: Vec<_> = drafter_tensors().into_iter().filter(|t| !matches!(t.0, "d2t" | "t2d" | "lm_head.weight")).collect();
    let mut p = Pair::new(tiny_target(), draft, &tensors);
    let f = p.check();
    assert_eq!(ids(&f), [("draft-architecture", Severity::Error)]);
    assert_eq!(f[0].evidence[1], Evidence::new(Side::Draft, p.draft_file("model.safetensors"), "fc.weight", json!([64, 192])));
    apply(&mut p.spec, &f, "set-draft-architecture");
    assert_eq!(p.spec.draft_overrides["/architectures"], json!(["LlamaForCausalLMEagle3"]));
    assert_eq!(ids(&p.check()), []);
    // The file on disk is untouched.
    let on_disk: Value = serde_json::from_str(&std::fs::read_to_string(p.draft_file("config.json")).unwrap()).unwrap();
    assert_eq!(on_disk["architectures"], json!(["LlamaForCausalLM"]));
}

#[test]
fn a_multi_layer_eagle3_drafter() {
    let mut draft = tiny_drafter();
    draft["num_hidden_layers"] = json!(2);
    let f = Pair::new(tiny_target(), draft, &drafter_tensors()).check();
    assert_eq!(ids(&f), [("draft-layers", Severity::Error)]);
    assert_eq!(f[0].evidence[0].value, json!(2));
}

#[test]
fn eagle3_drafter_under_eagle_is_the_silent_mismatch() {
    let mut p = Pair::tiny();
    p.spec.speculative_algorithm = Some(Algorithm::Eagle);
    let f = p.check();
    assert_eq!(ids(&f), [("algorithm-mismatch", Severity::Error)]);
    assert_eq!(f[0].phase.name(), "ready");
    assert!(f[0].message.contains("accepts about 1.0 token per step"), "{}", f[0].message);
    apply(&mut p.spec, &f, "set-speculative-algorithm");
    assert_eq!(p.spec.speculative_algorithm, Some(Algorithm::Eagle3));
    assert_eq!(ids(&p.check()), []);
}

#[test]
fn a_missing_algorithm_flag_is_inferred_and_said() {
    let mut p = Pair::tiny();
    p.spec.speculative_algorithm = None;
    let mut draft = tiny_drafter();
    draft["eagle_config"] = json!({"eagle_aux_hidden_state_layer_ids": [0, 1, 3]});
    std::fs::write(p.draft_file("config.json"), draft.to_string()).unwrap();
    let f = p.check();
    // The EAGLE-3 rules still ran, on the inferred algorithm.
    assert_eq!(ids(&f), [("aux-layer-out-of-range", Severity::Error), ("algorithm-mismatch", Severity::Warning)]);
    assert_eq!(f[1].evidence[0], Evidence::new(Side::Launch, "launch flags", "--speculative-algorithm", Value::Null));
    assert!(f[1].message.contains("the other rules assumed EAGLE3"), "{}", f[1].message);
}

#[test]
fn standalone_drafts_get_vocab_and_tokenizer_checks_but_not_eagle3_rules() {
    // A 2-layer ordinary model with another vocab and no EAGLE keys: a STANDALONE draft.
    let mut draft = tiny_target();
    draft["num_hidden_layers"] = json!(2);
    draft["vocab_size"] = json!(300);
    draft["eos_token_id"] = json!(7);
    let mut target = tiny_target();
    target["eos_token_id"] = json!(2);
    let mut p = Pair::new(target, draft, &[]);
    p.spec.speculative_algorithm = Some(Algorithm::Standalone);
    std::fs::write(p.target_file("tokenizer.json"), tokenizer_json(&["a", "b", "c"])).unwrap();
    std::fs::write(p.draft_file("tokenizer.json"), tokenizer_json(&["a", "c", "b"])).unwrap();
    let f = p.check();
    assert_eq!(
        ids(&f),
        [("vocab-mismatch", Severity::Error), ("tokenizer-mismatch", Severity::Error), ("tokenizer-mismatch", Severity::Warning)]
    );
    assert!(f[0].message.contains("STANDALONE speculative decoding requires the draft model to share the same vocabulary"));
    assert!(f[1].message.contains("the same number of tokens, but different token → id assignments"), "{}", f[1].message);
    assert_eq!(f[2].evidence[1], Evidence::new(Side::Draft, p.draft_file("config.json"), "/eos_token_id", json!([7])));
    // The same draft under EAGLE3 is an ordinary model: the algorithm is wrong.
    p.spec.speculative_algorithm = Some(Algorithm::Eagle3);
    let f = p.check();
    assert_eq!(f[0].id, "algorithm-mismatch");
    assert_eq!(
        f[0].remedies[0].changes[0],
        specdeck::spec::SpecChange::SetFlag { flag: "--speculative-algorithm".into(), value: "STANDALONE".into() }
    );
}

#[test]
fn special_tokens_from_tokenizer_files() {
    let p = Pair::tiny();
    std::fs::write(p.target_file("tokenizer_config.json"), r#"{"bos_token": "<s>", "eos_token": {"content": "</s>"}}"#).unwrap();
    std::fs::write(p.draft_file("tokenizer_config.json"), r#"{"bos_token": "<s>", "eos_token": "<|im_end|>"}"#).unwrap();
    std::fs::write(p.target_file("generation_config.json"), r#"{"bos_token_id": 1, "eos_token_id": [2, 3]}"#).unwrap();
    std::fs::write(p.draft_file("generation_config.json"), r#"{"bos_token_id": 1, "eos_token_id": 2}"#).unwrap();
    let f = p.check();
    assert_eq!(ids(&f), [("tokenizer-mismatch", Severity::Warning)]);
    let keys: Vec<(&str, &Value)> = f[0].evidence.iter().map(|e| (e.key.as_str(), &e.value)).collect();
    assert_eq!(
        keys,
        [
            ("/eos_token", &json!("</s>")),
            ("/eos_token", &json!("<|im_end|>")),
            ("/eos_token_id", &json!([2, 3])),
            ("/eos_token_id", &json!([2]))
        ]
    );
}

#[test]
fn target_capture_support_by_class() {
    let with_class = |class: &str| {
        let mut target = tiny_target();
        target["architectures"] = json!([class]);
        Pair::new(target, tiny_drafter(), &drafter_tensors()).check()
    };
    // Neither SGLang (as read) nor the engine: SGLang crashes, no bypass.
    let f = with_class("MixtralForCausalLM");
    assert_eq!(ids(&f), [("target-no-capture-support", Severity::Error)]);
    assert!(f[0].message.contains("No SGLang release read (0.4.10, 0.5.2, 0.5.9, 0.5.23)"), "{}", f[0].message);
    // The engine captures for Qwen2; SGLang only since 0.5.2.
    let f = with_class("Qwen2ForCausalLM");
    assert_eq!(ids(&f), [("target-no-capture-support", Severity::Info)]);
    assert!(f[0].message.contains("since 0.5.2 (qwen2.py); the releases read before it (0.4.10) fail"), "{}", f[0].message);
    // Llama: both, from the oldest release read.
    assert_eq!(ids(&with_class("LlamaForCausalLM")), []);
}

#[test]
fn speculative_argument_constraints() {
    let mut p = Pair::tiny();
    p.spec.speculative_eagle_topk = Some(4);
    let f = p.check();
    assert_eq!(ids(&f), [("speculative-args", Severity::Error)]);
    assert_eq!(f[0].remedies[0].id, "set-speculative-num-steps");

    p.spec.speculative_num_steps = Some(3);
    p.spec.speculative_eagle_topk = Some(1);
    p.spec.speculative_num_draft_tokens = Some(8);
    let f = p.check();
    assert_eq!(ids(&f), [("speculative-args", Severity::Warning)]);
    apply(&mut p.spec, &f, "set-num-draft-tokens");
    assert_eq!(p.spec.speculative_num_draft_tokens, Some(4));
    assert_eq!(ids(&p.check()), []);

    p.spec.speculative_eagle_topk = Some(2);
    p.spec.speculative_num_steps = Some(2);
    p.spec.speculative_num_draft_tokens = Some(8);
    let f = p.check();
    assert_eq!(ids(&f), [("speculative-args", Severity::Warning)]);
    assert!(f[0].message.contains("drafts at most 6 candidates, so at most 7 draft tokens"), "{}", f[0].message);

    p.spec.speculative_num_draft_tokens = Some(6);
    p.spec.env.insert("SGLANG_ENABLE_SPEC_V2".into(), "true".into());
    let f = p.check();
    assert_eq!(ids(&f), [("speculative-args", Severity::Error)]);
    apply(&mut p.spec, &f, "use-chain-drafting");
    assert_eq!((p.spec.speculative_eagle_topk, p.spec.speculative_num_draft_tokens), (Some(1), Some(3)));
    assert_eq!(ids(&p.check()), []);

    p.spec.speculative_num_steps = Some(0);
    assert_eq!(ids(&p.check()), [("speculative-args", Severity::Error)]);
}

#[test]
fn tp_must_divide_heads_and_fit_the_gpus() {
    let mut p = Pair::tiny();
    p.spec.tp_size = Some(8);
    // Two GPUs, as NVML would report them.
    let two = from_probe(&p.spec, &Ok(vec![Gpu { name: "H200".into(), memory_bytes: 141 << 30 }; 2]), None);
    let f = check_with_gpus(&p.spec, &two);
    assert_eq!(ids(&f), [("tp-divisibility", Severity::Error); 3]);
    assert!(f[0].message.contains("num_attention_heads = 4 must divide by the TP size"), "{}", f[0].message);
    assert!(f[2].message.starts_with("--tp-size 8 needs 8 GPUs, but 2 are visible (NVML: 2 × H200 (141.0 GiB))"), "{}", f[2].message);
    assert_eq!(f[2].remedies[0].changes[0], specdeck::spec::SpecChange::SetFlag { flag: "--tp-size".into(), value: "2".into() });
    apply(&mut p.spec, &f, "reduce-tp-size");
    assert_eq!(ids(&check_with_gpus(&p.spec, &two)), []);
    // No NVML: the count is unknown and said to be.
    p.spec.tp_size = Some(4);
    let f = check_with_gpus(&p.spec, &GpuInventory { memory_bytes: Some(80 << 30), ..GpuInventory::unknown("GPU count unknown: no NVML") });
    assert_eq!(ids(&f), [("tp-divisibility", Severity::Info)]);
    assert_eq!(f[0].message, "--tp-size 4 was not checked against the GPUs present: GPU count unknown: no NVML.");
}

#[test]
fn memory_budget_shows_the_numbers_and_offers_both_fixes() {
    let pair = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAIRS).join("qwen3-8b__eagle3");
    let mut spec = LaunchSpec {
        model_path: Some(pair.join("target").display().to_string()),
        draft_model_path: Some(pair.join("draft").display().to_string()),
        speculative_algorithm: Some(Algorithm::Eagle3),
        gpu_memory_gib: Some(24.0),
        ..LaunchSpec::default()
    };
    let gpus = from_probe(&spec, &Err("no NVML".into()), None);
    let f = check_with_gpus(&spec, &gpus);
    assert_eq!(ids(&f), [("memory-budget", Severity::Error)]);
    let m = &f[0].message;
    assert!(
        m.starts_with("The launch needs about 22.4 GiB per GPU, more than --mem-fraction-static 0.85 (assumed) × 24.0 GiB = 20.4 GiB"),
        "{m}"
    );
    assert!(m.contains("target weights 15.3 GiB ÷ 1 = 15.3 GiB (config estimate: 8.19 B params × 2 bytes)"), "{m}");
    assert!(m.contains("KV cache 40960 tokens (one request of the full context) × 148.0 KiB/token (K and V per layer) = 5.8 GiB"), "{m}");
    let remedies: Vec<(&str, &specdeck::spec::SpecChange)> = f[0].remedies.iter().map(|r| (r.id.as_str(), &r.changes[0])).collect();
    let set = |flag: &str, v: &str| specdeck::spec::SpecChange::SetFlag { flag: flag.into(), value: v.into() };
    assert_eq!(remedies, [("increase-tp-size", &set("--tp-size", "2")), ("reduce-context-length", &set("--context-length", "26624"))]);
    let mut wider = spec.clone();
    apply(&mut wider, &f, "increase-tp-size");
    assert_eq!(ids(&check_with_gpus(&wider, &gpus)), [("tp-divisibility", Severity::Info)]);
    apply(&mut spec, &f, "reduce-context-length");
    assert_eq!(ids(&check_with_gpus(&spec, &gpus)), []);
}

#[test]
fn mla_targets_count_the_latent_kv() {
    let spec = LaunchSpec { model_path: Some(format!("{}/{STORY}/target", env!("CARGO_MANIFEST_DIR"))), ..LaunchSpec::default() };
    // With no GPU memory known there is no budget, so no finding; on one 80 GiB GPU the
    // whole model cannot fit, and the message shows the breakdown.
    assert_eq!(ids(&check_with_gpus(&spec, &GpuInventory::unknown("no GPU"))), []);
    let f = check_with_gpus(&spec, &one_80g_gpu());
    assert_eq!(ids(&f), [("memory-budget", Severity::Error)]);
    // 61 layers × (512 + 64) latent × 2 bytes = 68.6 KiB per token, on every rank.
    assert!(
        f[0].message.contains("KV cache 262144 tokens (one request of the full context) × 68.6 KiB/token (MLA latent"),
        "{}",
        f[0].message
    );
}

#[test]
fn gpu_inventory_on_this_machine_never_panics() {
    let inv = specdeck::preflight::gpu::inventory(&LaunchSpec::default());
    match inv.count {
        None => assert!(inv.source.contains("NVML"), "{}", inv.source),
        Some(n) => assert!(n == 0 || inv.memory_bytes.is_some(), "{inv:?}"),
    }
    // check_spec (with this machine's inventory) runs the same rules.
    let spec = LaunchSpec { model_path: Some(format!("{}/{STORY}/target", env!("CARGO_MANIFEST_DIR"))), ..LaunchSpec::default() };
    assert_eq!(check_spec(&spec).iter().filter(|f| f.is_error() && f.id != "memory-budget").count(), 0);
}

// ---------------------------------------------------------------------------------------
// No input panics

fn story_config(side: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(STORY).join(side).join("config.json")).unwrap()
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e20f64..1e20).prop_map(Value::from),
        (0u64..5).prop_map(Value::from),
        "[a-z_]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..3).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The keys the rules read, where a fuzzed value lands.
const KEYS: &[&str] = &[
    "/hidden_size",
    "/num_hidden_layers",
    "/num_attention_heads",
    "/num_key_value_heads",
    "/head_dim",
    "/intermediate_size",
    "/vocab_size",
    "/draft_vocab_size",
    "/target_hidden_size",
    "/max_position_embeddings",
    "/rope_theta",
    "/rope_scaling",
    "/architectures",
    "/eagle_config",
    "/eagle_config/eagle_aux_hidden_state_layer_ids",
    "/torch_dtype",
    "/dtype",
    "/tie_word_embeddings",
    "/text_config",
    "/text_config/num_hidden_layers",
    "/text_config/kv_lora_rank",
    "/n_routed_experts",
    "/quantization_config",
    "/fc_norm",
    "/eos_token_id",
];

fn run_on(target: &[u8], draft: &[u8], st: Option<&[u8]>, spec_edit: impl Fn(&mut LaunchSpec)) -> (Vec<Finding>, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let d = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("config.json"), target).unwrap();
    std::fs::write(d.path().join("config.json"), draft).unwrap();
    if let Some(bytes) = st {
        std::fs::write(d.path().join("model.safetensors"), bytes).unwrap();
    }
    let mut spec = LaunchSpec {
        model_path: Some(t.path().display().to_string()),
        draft_model_path: Some(d.path().display().to_string()),
        speculative_algorithm: Some(Algorithm::Eagle3),
        ..LaunchSpec::default()
    };
    spec_edit(&mut spec);
    let findings = check_with_gpus(&spec, &one_80g_gpu());
    (findings, d.path().to_path_buf())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn fuzzed_config_values_never_panic(side in 0usize..2, key in 0..KEYS.len(), value in arbitrary_json(),
                                        tp in 1u32..9, ctx in prop::option::of(0u64..1_000_000)) {
        let (mut t, mut d): (Value, Value) = (serde_json::from_str(&story_config("target")).unwrap(), serde_json::from_str(&story_config("draft")).unwrap());
        let cfg = if side == 0 { &mut t } else { &mut d };
        if let Some(slot) = cfg.pointer_mut(KEYS[key]) { *slot = value.clone() } else { cfg[&KEYS[key][1..]] = value.clone() }
        let (findings, _) = run_on(t.to_string().as_bytes(), d.to_string().as_bytes(), None, |s| { s.tp_size = Some(tp); s.context_length = ctx; });
        for f in &findings {
            prop_assert!(!f.message.is_empty());
        }
    }

    #[test]
    fn truncated_configs_are_unreadable_input(cut in 0usize..2000, side in 0usize..2) {
        // Trailing whitespace cut off leaves valid JSON, so cut inside the text proper.
        let (t, d) = (story_config("target").trim_end().to_string(), story_config("draft").trim_end().to_string());
        let text = if side == 0 { &t } else { &d };
        let cut = cut.min(text.len() - 1);
        let (tb, db) = if side == 0 { (&t.as_bytes()[..cut], d.as_bytes()) } else { (t.as_bytes(), &d.as_bytes()[..cut]) };
        let (findings, _) = run_on(tb, db, None, |_| {});
        prop_assert_eq!(specdeck::finding::exit_code(&findings), 2);
        prop_assert!(findings.iter().any(|f| f.id == "unreadable-input" && f.message.contains("config.json: invalid JSON at line")));
    }

    #[test]
    fn random_bytes_never_panic(config in prop::collection::vec(any::<u8>(), 0..200), st in prop::collection::vec(any::<u8>(), 0..300)) {
        let (findings, _) = run_on(&config, &config, Some(&st), |_| {});
        // Only bytes that happen to be a JSON object can pass as a config.
        let object = serde_json::from_slice::<Value>(&config).is_ok_and(|v| v.is_object());
        prop_assert!(object || specdeck::finding::exit_code(&findings) == 2);
    }

    #[test]
    fn truncated_or_corrupted_safetensors_never_panic(cut in 0usize..4000, flip in prop::option::of((0usize..4000, any::<u8>()))) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        write_safetensors(&path, &drafter_tensors());
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some((at, b)) = flip { let at = at % bytes.len(); bytes[at] = b; }
        bytes.truncate(cut.min(bytes.len()));
        let (findings, draft_dir) = run_on(story_config("target").as_bytes(), tiny_drafter().to_string().as_bytes(), Some(&bytes), |_| {});
        for f in findings.iter().filter(|f| f.id == "unreadable-input") {
            prop_assert!(f.message.contains(&draft_dir.join("model.safetensors").display().to_string()), "{}", f.message);
        }
    }
}
