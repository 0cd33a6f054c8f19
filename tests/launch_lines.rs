//! Launch lines as users write them, through the real binary (`check`) on the real config
//! pairs of testdata/check/pairs: argparse prefixes, NEXTN, docker and env wrappers, one
//! quoted string, backslash-newlines, a script file, vLLM's `serve`, the Hugging Face cache
//! (laid out as huggingface_hub writes it, in a tempdir), the flags no rule checks, and the
//! fixed command `--apply` gives.

mod common;

use std::path::Path;
use std::process::Output;

use common::binary::{specdeck, text};
use serde_json::{json, Value};

const STORY: &str = "testdata/check/pairs/kimi-k2.5__kimi-k2-aq-medai-eagle3";
const CLEAN: &str = "testdata/check/pairs/qwen3-8b__eagle3";
const ALLOW: &str = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN";

/// `check --json [ARGS] -- LINE` (the line split on spaces), parsed.
fn check(args: &[&str], line: &str, env: &[(&str, &str)]) -> Value {
    let mut all = vec!["check", "--json"];
    all.extend_from_slice(args);
    all.push("--");
    all.extend(line.split_whitespace());
    json_of(&specdeck(&all, env))
}

fn json_of(o: &Output) -> Value {
    let v: Value = serde_json::from_str(&text(&o.stdout)).unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&o.stdout), text(&o.stderr)));
    assert_eq!(v["exit"], o.status.code().unwrap());
    v
}

fn ids(v: &Value) -> Vec<(String, String)> {
    v["findings"].as_array().unwrap().iter().map(|f| (f["id"].as_str().unwrap().into(), f["severity"].as_str().unwrap().into())).collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn finding<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["findings"].as_array().unwrap().iter().find(|f| f["id"] == id).unwrap_or_else(|| panic!("no {id} in {v}"))
}

fn sglang(pair: &str, rest: &str) -> String {
    format!("python3 -m sglang.launch_server --model-path {pair}/target --speculative-draft-model-path {pair}/draft {rest}")
}

const STORY_IDS: &[(&str, &str)] =
    &[("context-length-exceeds-draft", "error"), ("rope-mismatch", "warning"), ("target-no-capture-support", "info")];

#[test]
fn an_argparse_prefix_reads_as_the_whole_flag_and_an_ambiguous_one_is_refused() {
    let v = check(&[], &sglang(STORY, "--speculative-algo EAGLE3"), &[]);
    assert_eq!(ids(&v), pairs(STORY_IDS));
    assert_eq!(v["exit"], 1);

    let o = specdeck(&["check", "--", "python3", "-m", "sglang.launch_server", "--model-path", "m", "--speculative-draft", "d"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr),
        "specdeck: --speculative-draft: ambiguous option: could match --speculative-draft-model-path, --speculative-draft-model, \
         --speculative-draft-model-revision, --speculative-draft-load-format, --speculative-draft-attention-backend, \
         --speculative-draft-model-quantization (SGLang accepts a prefix of one option only)\n"
    );
}

#[test]
fn nextn_and_mtp_run_as_eagle() {
    for name in ["NEXTN", "MTP"] {
        let v = check(&[], &sglang(STORY, &format!("--speculative-algorithm {name}")), &[]);
        assert_eq!(finding(&v, "algorithm-mismatch")["severity"], "error", "{name}: {v}");
        assert!(finding(&v, "algorithm-mismatch")["evidence"].as_array().unwrap().iter().any(|e| e["value"] == "EAGLE"), "{v}");
    }
}

#[test]
fn the_page_size_with_a_tree_draft_is_the_finding_replay_gives() {
    let tree = "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8";
    let v = check(&[], &sglang(CLEAN, &format!("{tree} --page-size 64")), &[]);
    assert_eq!(ids(&v), pairs(&[("speculative-args", "error")]));
    let f = finding(&v, "speculative-args");
    assert!(f["message"].as_str().unwrap().starts_with("--speculative-eagle-topk > 1 (tree drafting) with --page-size > 1"), "{f}");
    let remedies: Vec<&str> = f["remedies"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(remedies, ["page-size-1", "eagle-topk-1"]);
    // flashinfer pages a tree; SGLang accepts it.
    let v = check(&[], &sglang(CLEAN, &format!("{tree} --page-size 64 --attention-backend flashinfer")), &[]);
    assert_eq!(ids(&v), pairs(&[]));
    let v = check(&[], &sglang(CLEAN, "--speculative-algorithm EAGLE3 --page-size 64 --chunked-prefill-size 1000"), &[]);
    assert_eq!(ids(&v), pairs(&[("speculative-args", "error")]));
    assert_eq!(finding(&v, "speculative-args")["remedies"][0]["changes"][0]["value"], "960");
}

#[test]
fn the_environment_of_docker_env_and_leading_assignments_is_honoured() {
    let served = sglang(STORY, "--speculative-algorithm EAGLE3");
    for wrapper in [
        format!("docker run --gpus all --ipc=host -e {ALLOW}=1 lmsysorg/sglang:latest"),
        format!("docker run --env {ALLOW}=1 -v /m:/m lmsysorg/sglang:latest"),
        format!("docker run --env={ALLOW}=1 lmsysorg/sglang:latest"),
        format!("env {ALLOW}=1"),
        format!("{ALLOW}=1"),
    ] {
        let v = check(&[], &format!("{wrapper} {served}"), &[]);
        assert_eq!(finding(&v, "context-length-exceeds-draft")["severity"], "warning", "{wrapper}");
        assert_eq!(v["exit"], 0, "{wrapper}");
    }
}

#[test]
fn one_quoted_string_with_backslash_newlines_and_a_script_file() {
    let line = format!(
        "{ALLOW}=1 python3 -m sglang.launch_server \\\n  --model-path {STORY}/target \\\n  --speculative-draft-model-path {STORY}/draft \\\n  --speculative-algorithm EAGLE3"
    );
    let v = json_of(&specdeck(&["check", "--json", "--", &line], &[]));
    assert_eq!(finding(&v, "context-length-exceeds-draft")["severity"], "warning");

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("launch.sh");
    let root = env!("CARGO_MANIFEST_DIR");
    std::fs::write(
        &script,
        format!(
            "#!/usr/bin/env bash\nset -euo pipefail\n# serve the story pair\nexport {ALLOW}=1\ncd {root}\n\
             python3 -m sglang.launch_server \\\n  --model-path {STORY}/target \\\n  --speculative-draft-model-path {STORY}/draft \\\n  \
             --speculative-algorithm EAGLE3 --host 0.0.0.0 2>&1 | tee server.log\n"
        ),
    )
    .unwrap();
    let o = specdeck(&["check", "--json", "--from-file", script.to_str().unwrap()], &[]);
    let v = json_of(&o);
    assert_eq!(finding(&v, "context-length-exceeds-draft")["severity"], "warning");
    assert_eq!(v["not_checked"], json!([{"flag": "--host", "value": "0.0.0.0"}]));
    std::fs::write(&script, "set -e\necho no server here\n").unwrap();
    let o = specdeck(&["check", "--from-file", script.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("no line of the script runs sglang or vllm"), "{}", text(&o.stderr));
}

#[test]
fn vllm_serve_reads_the_speculative_config_with_vllms_semantics() {
    let config = format!(r#"{{"model": "{STORY}/draft", "num_speculative_tokens": 3, "method": "eagle3"}}"#);
    let o = specdeck(
        &[
            "check",
            "--json",
            "--",
            "vllm",
            "serve",
            &format!("{STORY}/target"),
            "--tensor-parallel-size",
            "8",
            "--speculative-config",
            &config,
        ],
        &[],
    );
    let v = json_of(&o);
    // vLLM runs the drafter at the target's length: the same mismatch is a warning there.
    let f = finding(&v, "context-length-exceeds-draft");
    assert_eq!(f["severity"], "warning");
    assert!(f["message"].as_str().unwrap().contains("vLLM runs the drafter at the target's max_model_len (262144)"), "{f}");
    assert_eq!(v["exit"], 0);
    let o = specdeck(
        &[
            "check",
            "--json",
            "--",
            "vllm",
            "serve",
            &format!("{STORY}/target"),
            "--speculative-model",
            &format!("{STORY}/draft"),
            "--num-speculative-tokens",
            "3",
        ],
        &[],
    );
    assert_eq!(finding(&json_of(&o), "context-length-exceeds-draft")["severity"], "warning");
}

#[test]
fn flags_no_rule_checks_are_echoed_as_not_checked() {
    let line = sglang(CLEAN, "--speculative-algorithm EAGLE3 --trust-remote-code --served-model-name qwen --host 0.0.0.0 --port 30000");
    let v = check(&[], &line, &[]);
    assert_eq!(
        v["not_checked"],
        json!([
            {"flag": "--served-model-name", "value": "qwen"},
            {"flag": "--trust-remote-code", "value": null},
            {"flag": "--host", "value": "0.0.0.0"},
            {"flag": "--port", "value": "30000"}
        ])
    );
    assert_eq!(v["fixed_command"], Value::Null, "nothing applied");
    let mut args = vec!["check", "--"];
    args.extend(line.split_whitespace());
    let out = text(&specdeck(&args, &[]).stdout);
    assert!(out.contains("\n  not checked --served-model-name qwen --trust-remote-code --host 0.0.0.0 --port 30000\n"), "{out}");
}

#[test]
fn the_fixed_command_is_the_users_line_with_the_fix_in() {
    let line = format!(
        "docker run --gpus all -e HF_TOKEN=x lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path {STORY}/target \
         --speculative-draft-model-path {STORY}/draft --speculative-algo EAGLE3 --tp 8 --trust-remote-code --port 30000"
    );
    let v = check(&["--apply", "clamp-context-length"], &line, &[]);
    assert_eq!(v["exit"], 0);
    assert_eq!(
        v["fixed_command"],
        format!(
            "docker run --gpus all -e HF_TOKEN=x lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path {STORY}/target \
             --speculative-draft-model-path {STORY}/draft --speculative-algo EAGLE3 --tp 8 --trust-remote-code --port 30000 \
             --context-length 131072"
        )
    );
    let v = check(&["--apply", "allow-longer-context"], &line, &[]);
    assert_eq!(
        v["fixed_command"].as_str().unwrap().lines().collect::<Vec<_>>(),
        [
            format!(
                "docker run -e {ALLOW}=1 --gpus all -e HF_TOKEN=x lmsysorg/sglang:latest python3 -m sglang.launch_server \
                 --model-path {STORY}/target --speculative-draft-model-path {STORY}/draft --speculative-algo EAGLE3 --tp 8 \
                 --trust-remote-code --port 30000"
            ),
            format!(
                "# and the drafter's config.json /max_position_embeddings = 262144: no flag overrides the drafter's config \
                 (SGLang's --json-model-override-args is the target's); with {ALLOW}=1 SGLang runs the drafter at the target's \
                 context itself"
            ),
        ]
    );
    let mut args = vec!["check", "--apply", "clamp-context-length", "--"];
    args.extend(line.split_whitespace());
    let out = text(&specdeck(&args, &[]).stdout);
    assert!(out.contains("\nfixed command:\ndocker run --gpus all -e HF_TOKEN=x lmsysorg/sglang:latest python3"), "{out}");
    assert!(out.ends_with("--context-length 131072\n\n0 errors, 1 warning, 2 notes: exit 0\n"), "{out}");
}

// ---------------------------------------------------------------------------------------
// The Hugging Face cache

const TARGET_COMMIT: &str = "0e9e39f249a16976918f6564b8830bc894c89659";
const DRAFT_COMMIT: &str = "7c1f2b9d3e4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c";

/// A hub cache holding `repo` as huggingface_hub writes it: the file under blobs/ by its
/// hash, refs/main naming the commit, snapshots/<commit>/config.json a relative link.
fn cache_repo(cache: &Path, repo: &str, commit: &str, config: &Path) {
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let blob = format!("{:x}", config.to_string_lossy().len() * 7919 + commit.len());
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::create_dir_all(dir.join("snapshots").join(commit)).unwrap();
    std::fs::copy(config, dir.join("blobs").join(&blob)).unwrap();
    std::fs::write(dir.join("refs/main"), commit).unwrap();
    std::os::unix::fs::symlink(format!("../../blobs/{blob}"), dir.join("snapshots").join(commit).join("config.json")).unwrap();
}

fn story_cache() -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(STORY);
    cache_repo(cache.path(), "moonshotai/Kimi-K2.5", TARGET_COMMIT, &root.join("target/config.json"));
    cache_repo(cache.path(), "AQ-MedAI/Kimi-K2-Instruct-eagle3", DRAFT_COMMIT, &root.join("draft/config.json"));
    cache
}

const HUB_LINE: &str = "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 \
                        --speculative-draft-model-path AQ-MedAI/Kimi-K2-Instruct-eagle3 --speculative-algorithm EAGLE3";

#[test]
fn repo_ids_resolve_in_the_hub_cache_and_are_shown_by_id() {
    let cache = story_cache();
    let v = check(&[], HUB_LINE, &[("HF_HUB_CACHE", cache.path().to_str().unwrap())]);
    assert_eq!(ids(&v), pairs(STORY_IDS));
    let f = finding(&v, "context-length-exceeds-draft");
    assert_eq!(f["evidence"][0]["file"], "moonshotai/Kimi-K2.5 (snapshot 0e9e39f)/config.json");
    assert_eq!(f["evidence"][1]["file"], "AQ-MedAI/Kimi-K2-Instruct-eagle3 (snapshot 7c1f2b9)/config.json");

    // HF_HOME/hub, then ~/.cache/huggingface/hub; a revision by commit hash.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".cache/huggingface")).unwrap();
    std::os::unix::fs::symlink(cache.path(), home.path().join(".cache/huggingface/hub")).unwrap();
    let with_rev = format!("{HUB_LINE} --revision {TARGET_COMMIT} --speculative-draft-model-revision main");
    for env in [("HF_HOME", home.path().join(".cache/huggingface")), ("HOME", home.path().to_path_buf())] {
        let v = check(&[], &with_rev, &[(env.0, env.1.to_str().unwrap())]);
        assert_eq!(ids(&v), pairs(STORY_IDS), "{env:?}");
    }
    let files: Vec<_> = walk(cache.path());
    assert_eq!(files.len(), 16, "the cache is read, never written: {files:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn an_absent_repo_names_the_id_and_the_two_configs_to_fetch() {
    let cache = tempfile::tempdir().unwrap();
    let v = check(&[], HUB_LINE, &[("HF_HUB_CACHE", cache.path().to_str().unwrap())]);
    assert_eq!(v["exit"], 2);
    let f = &v["findings"][0];
    assert_eq!(f["id"], "unreadable-input");
    assert_eq!(
        f["message"].as_str().unwrap().lines().next().unwrap(),
        format!(
            "moonshotai/Kimi-K2.5: not a folder, and not in the Hugging Face cache (searched {}). check reads only the config.json \
             of the target and of the drafter: fetch `huggingface-cli download moonshotai/Kimi-K2.5 config.json` and \
             `huggingface-cli download AQ-MedAI/Kimi-K2-Instruct-eagle3 config.json`",
            cache.path().display()
        )
    );
    let v = check(&[], &format!("{HUB_LINE} --revision v9"), &[("HF_HUB_CACHE", story_cache().path().to_str().unwrap())]);
    assert_eq!(v["exit"], 2);
    assert!(
        v["findings"][0]["message"].as_str().unwrap().contains("moonshotai/Kimi-K2.5: revision v9 is not in the Hugging Face cache"),
        "{v}"
    );
}
