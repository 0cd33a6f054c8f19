//! The command line as a user meets it (issue 22, item 7), run through the real binary: help
//! for every option, exit statuses, `--color`, `--version`, `--strict`, the JSON error object
//! of `generate --json` and `bench --json`, one `--apply` check on every command, and the
//! README's id lists checked against the code.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use common::binary::{specdeck, text};
use common::tiny_pair::pair;
use regex::Regex;
use serde_json::Value;
use specdeck::commands::catalog::{FINDINGS, REMEDIES, REPLAY_REMEDIES};
use specdeck::spec::FLAGS;

const PAIRS: &str = "testdata/check/pairs";
const STORY: &str = "kimi-k2.5__kimi-k2-aq-medai-eagle3";
const CLEAN: &str = "qwen3-8b__eagle3";

fn pair_args(pair: &str) -> Vec<String> {
    let (target, draft) = (format!("{PAIRS}/{pair}/target"), format!("{PAIRS}/{pair}/draft"));
    ["--model-path", &target, "--speculative-draft-model-path", &draft, "--speculative-algorithm", "EAGLE3"].map(String::from).to_vec()
}

fn with<'a>(head: &[&'a str], args: &'a [String], tail: &[&'a str]) -> Vec<&'a str> {
    head.iter().copied().chain(args.iter().map(String::as_str)).chain(tail.iter().copied()).collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

// ---- help ----

/// Every argument of every (sub)command, by its command path.
fn all_args(cmd: &clap::Command, at: &str, out: &mut Vec<(String, clap::Arg)>) {
    for arg in cmd.get_arguments() {
        out.push((at.to_string(), arg.clone()));
    }
    for sub in cmd.get_subcommands() {
        all_args(sub, &format!("{at} {}", sub.get_name()), out);
    }
}

#[test]
fn every_option_of_every_command_has_help_and_launch_flags_show_the_flag_tables() {
    let mut cmd = specdeck::commands::command();
    cmd.build();
    let mut args = Vec::new();
    all_args(&cmd, "specdeck", &mut args);
    assert!(args.len() > 60, "{}", args.len());
    for (at, arg) in &args {
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let long = arg.get_long().unwrap_or_default();
        let launch_flags = ["check", "launch", "generate", "bench"].iter().any(|c| *at == format!("specdeck {c}"));
        match FLAGS.iter().find(|def| launch_flags && def.name.trim_start_matches("--") == long) {
            // The launch flags' help is spec::FLAGS's, shown as it is written there.
            Some(def) => assert_eq!(help, def.help, "{at} --{long}"),
            None => assert!(!help.trim().is_empty(), "{at}: {} has no help", arg.get_id()),
        }
    }
}

#[test]
fn headless_is_an_option_of_launch_replay_and_the_demo_only() {
    let mut cmd = specdeck::commands::command();
    cmd.build();
    let has_headless = |c: &clap::Command| c.get_arguments().any(|a| a.get_long() == Some("headless"));
    assert!(has_headless(&cmd));
    let with: Vec<&str> = cmd.get_subcommands().filter(|c| has_headless(c)).map(clap::Command::get_name).collect();
    assert_eq!(with, ["launch", "replay"]);
    let o = specdeck(&["check", "--help"], &[]);
    assert!(!text(&o.stdout).contains("--headless"), "{}", text(&o.stdout));
    let o = specdeck(&["--headless", "check", "--model-path", "x"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--headless applies to launch, replay and the demo only"), "{}", text(&o.stderr));
}

#[test]
fn help_ends_with_examples_and_each_command_names_its_exit_statuses() {
    let top = text(&specdeck(&["--help"], &[]).stdout);
    assert!(top.contains("\nExamples:\n  specdeck                                    the embedded demo"), "{top}");
    assert!(top.contains("--color <WHEN>"), "{top}");
    for command in ["check", "launch", "replay", "generate", "bench"] {
        let help = text(&specdeck(&[command, "--help"], &[]).stdout);
        assert!(help.contains(&format!("\nExamples:\n  specdeck {command} ")), "{command}: {help}");
        assert!(help.contains("\nExit status: 0 "), "{command}: {help}");
    }
}

#[test]
fn version_names_the_cuda_and_nvml_support() {
    let o = specdeck(&["--version"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    let first = format!("specdeck {}", env!("CARGO_PKG_VERSION"));
    assert!(out.starts_with(&first), "{out}");
    assert!(out.contains("\nCUDA: dynamic (driver API, NVRTC, cuBLAS, cuBLASLt, NCCL; loaded at run time"), "{out}");
    assert!(out.contains("\nNVML: dynamic (libnvidia-ml loaded at run time;"), "{out}");
}

// ---- check: exit statuses, --strict, --color ----

#[test]
fn check_exits_0_clean_1_at_errors_and_2_at_unreadable_input() {
    assert_eq!(specdeck(&with(&["check"], &pair_args(CLEAN), &[]), &[]).status.code(), Some(0));
    assert_eq!(specdeck(&with(&["check"], &pair_args(STORY), &[]), &[]).status.code(), Some(1));
    let missing = specdeck(&["check", "--model-path", "testdata/no-such-folder"], &[]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn strict_fails_on_warnings_and_leaves_a_clean_check_at_0() {
    let story = pair_args(STORY);
    let fixed = with(&["check"], &story, &["--apply", "clamp-context-length"]);
    let o = specdeck(&fixed, &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o.stdout).ends_with("0 errors, 1 warning, 1 note: exit 0\n"));
    let strict: Vec<&str> = fixed.iter().copied().chain(["--strict"]).collect();
    let o = specdeck(&strict, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).ends_with("0 errors, 1 warning, 1 note: exit 1\n"), "{}", text(&o.stdout));
    let json: Vec<&str> = strict.iter().copied().chain(["--json"]).collect();
    let o = specdeck(&json, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(serde_json::from_slice::<Value>(&o.stdout).unwrap()["exit"], 1);
    assert_eq!(specdeck(&with(&["check", "--strict"], &pair_args(CLEAN), &[]), &[]).status.code(), Some(0));
}

#[test]
fn color_always_styles_never_and_auto_off_a_terminal_do_not() {
    let story = pair_args(STORY);
    let run = |color: &[&str], env: &[(&str, &str)]| text(&specdeck(&with(&["check"], &story, color), env).stdout);
    let plain = run(&[], &[]);
    assert!(!plain.contains('\u{1b}'));
    assert_eq!(run(&["--color", "never"], &[]), plain);
    assert_eq!(run(&["--color", "auto"], &[]), plain);
    let styled = run(&["--color", "always"], &[("NO_COLOR", "1")]);
    // The severity bold red, the offending key bold magenta.
    assert!(styled.starts_with("specdeck check\n"), "{styled}");
    assert!(styled.contains("\u{1b}[38;5;9m\u{1b}[1merror\u{1b}[0m"), "{styled:?}");
    assert!(styled.contains("\u{1b}[38;5;13m\u{1b}[1m"), "{styled:?}");
    assert_eq!(strip_ansi_escapes::strip_str(&styled), plain);
    // The option is global: given after the subcommand's own flags too.
    let o = specdeck(&["--color", "sometimes", "check"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("[possible values: auto, always, never]"), "{}", text(&o.stderr));
}

// ---- --apply ----

#[test]
fn an_unknown_apply_id_stops_every_command_naming_it_and_the_known_ones() {
    let p = pair();
    let prompts = p.dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"w5\"}\n").unwrap();
    let target = path(&p.target);
    let message = "--apply clamp-context: no remedy has this id; the known ids: align-chunked-prefill-size, allow-longer-context,";
    let cases: [(&str, Vec<&str>); 5] = [
        ("specdeck check: ", vec!["check", "--model-path", target]),
        ("specdeck: ", vec!["launch", "--headless", "--model-path", target, "--prompt", "w5"]),
        ("specdeck: ", vec!["--headless"]),
        ("specdeck: ", vec!["generate", "--model-path", target, "--prompt", "w5"]),
        ("specdeck: ", vec!["bench", "--model-path", target, "--prompts", path(&prompts)]),
    ];
    for (prefix, mut args) in cases {
        args.extend(["--apply", "clamp-context"]);
        let o = specdeck(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.starts_with(&format!("{prefix}{message}")), "{args:?}: {err}");
        assert!(err.ends_with(", use-default-speculative-args\n"), "{args:?}: {err}");
    }
}

// ---- generate --json and bench --json failures ----

fn json_error(o: &Output) -> Value {
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&o.stdout), text(&o.stderr)));
    assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["error"]);
    let keys: Vec<&String> = v["error"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["kind", "message", "findings"]);
    v["error"].clone()
}

#[test]
fn generate_and_bench_print_a_json_error_object_with_the_exit_status_of_the_text_run() {
    let p = pair();
    let prompts = p.dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"w5\"}\n").unwrap();
    let story = pair_args(STORY);
    for tail in [vec!["generate", "--prompt", "w5"], vec!["bench", "--prompts", path(&prompts)]] {
        let args = with(&tail, &story, &[]);
        let text_run = specdeck(&args, &[]);
        assert_eq!(text_run.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&text_run.stdout), "");
        let json: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
        let o = specdeck(&json, &[]);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&o.stderr), text(&text_run.stderr), "stderr is the same with --json");
        let e = json_error(&o);
        assert_eq!(e["kind"], "preflight");
        let ids = "context-length-exceeds-draft, rope-mismatch, target-no-capture-support";
        assert_eq!(e["message"], format!("the launch stopped at 3 findings: {ids}"));
        assert_eq!(e["findings"][0]["id"], "context-length-exceeds-draft");
        assert_eq!(e["findings"][0]["remedies"][0]["id"], "clamp-context-length");
    }

    std::fs::write(&prompts, "{\"text\": \"no prompt key\"}\n").unwrap();
    let o = specdeck(&["bench", "--model-path", path(&p.target), "--prompts", path(&prompts), "--json"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = json_error(&o);
    assert_eq!(e["kind"], "input");
    assert!(e["message"].as_str().unwrap().ends_with("prompts.jsonl: line 1: no \"prompt\" string"), "{e}");
    assert_eq!(e["findings"], serde_json::json!([]));

    let o = specdeck(&["generate", "--model-path", path(&p.target), "--prompt", "w5", "--tp-size", "eight", "--json"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json_error(&o)["message"], "--tp-size: expected a positive integer, got \"eight\"");
    let o = specdeck(&["generate", "--model-path", path(&p.target), "--prompt", "w5", "--apply", "nope", "--json"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json_error(&o)["kind"], "apply");
}

// ---- bench's table ----

#[test]
fn bench_prints_a_table_without_token_ids_unless_verbose() {
    let p = pair();
    let prompts = p.dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"w5 w9\"}\n").unwrap();
    let mut args = vec!["bench", "--model-path", path(&p.target), "--speculative-algorithm", "EAGLE3"];
    args.extend(["--speculative-draft-model-path", path(&p.eagle), "--prompts", path(&prompts), "--max-new-tokens", "6"]);
    let o = specdeck(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let table = text(&o.stdout);
    assert!(table.starts_with("bench: 1 prompts on cpu, tp 1\n"), "{table}");
    assert!(table.contains("\n  mean accept length "), "{table}");
    assert!(!table.contains("token ids") && !table.contains('['), "{table}");
    args.push("--verbose");
    let table = text(&specdeck(&args, &[]).stdout);
    assert!(Regex::new(r"\n  token ids, prompt 1: \[\d+(,\d+){5}\]\n$").unwrap().is_match(&table), "{table}");
}

// ---- Ctrl-C ----

#[tokio::test]
async fn ctrl_c_in_the_console_exits_130_and_q_exits_0() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use specdeck::console::app::{Options, State};
    use specdeck::console::headless::Printer;
    use specdeck::console::keymap::Keymap;
    use specdeck::console::layout::Layout;
    use specdeck::console::run::{run, Session, UserInput};
    use specdeck::event::EventSink;
    use specdeck::spec::LaunchSpec;

    for (key, code) in [(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL), 130), (KeyEvent::from(KeyCode::Char('q')), 0)] {
        let (sink, events) = EventSink::channel();
        let layouts = vec![Layout::builtin("default").unwrap()];
        let state = State::new(LaunchSpec::default(), Options::default(), Keymap::default(), layouts);
        let session = Session { state, engine: None, sink, recorder: None };
        let (inputs_tx, inputs) = tokio::sync::mpsc::unbounded_channel();
        inputs_tx.send(UserInput::Key(key)).unwrap();
        let mut printer = Printer::new(Vec::new(), Vec::new());
        assert_eq!(run(session, events, inputs, &mut printer).await.code, code, "{key:?}");
    }
}

// ---- the README's id lists ----

/// README.md's id section as the tables make it.
fn ids_section() -> String {
    let list = |ids: &[&str]| ids.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ");
    format!(
        "<!-- ids: generated from src/commands/catalog.rs; tests/cli.rs fails when they differ -->\n\
         Finding ids: {}.\n\n\
         Remedy ids `--apply` takes: {}.\n\n\
         Remedy ids of a replay's diagnosis (changes to the SGLang or vLLM line that wrote the log): {}.\n\
         <!-- end of ids -->",
        list(FINDINGS),
        list(REMEDIES),
        list(REPLAY_REMEDIES)
    )
}

#[test]
fn the_readme_lists_exactly_the_finding_and_remedy_ids_of_the_tables() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let expected = ids_section();
    assert!(readme.contains(&expected), "README.md's id section should read:\n{expected}");
}

/// The ids the source spells out where it builds findings and remedies (outside its tests):
/// consts, and the first argument of the calls that make a finding or a remedy.
fn ids_in_source() -> BTreeSet<String> {
    let id = r#""([a-z][a-z0-9]*(?:-[a-z0-9]+)+)""#;
    let konst = Regex::new(&format!(r"const [A-Z0-9_]+: &str = {id};")).unwrap();
    let call = Regex::new(&format!(r"\b(?:Finding::new|Remedy::new|failure|one|set_flag|switch)\(\s*{id}")).unwrap();
    let mut ids = BTreeSet::new();
    for dir in ["src/preflight", "src/engine", "src/replay"] {
        for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)).unwrap() {
            let file = entry.unwrap().path();
            if file.extension().is_some_and(|e| e == "rs") {
                let source = std::fs::read_to_string(&file).unwrap();
                let code = source.split("#[cfg(test)]").next().unwrap();
                for re in [&konst, &call] {
                    ids.extend(re.captures_iter(code).map(|c| c[1].to_string()));
                }
            }
        }
    }
    ids.insert(specdeck::finding::UNREADABLE_INPUT.to_string());
    ids
}

#[test]
fn the_tables_hold_every_id_the_source_builds_and_no_other() {
    let tables: BTreeSet<String> = [FINDINGS, REMEDIES, REPLAY_REMEDIES].concat().iter().map(|s| s.to_string()).collect();
    assert_eq!(tables, ids_in_source());
}

#[test]
fn every_pairs_findings_and_remedies_are_in_the_tables() {
    let mut seen = 0;
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(PAIRS)).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let o = specdeck(&with(&["check", "--json"], &pair_args(&name), &[]), &[]);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        for f in v["findings"].as_array().unwrap() {
            assert!(FINDINGS.contains(&f["id"].as_str().unwrap()), "{name}: {}", f["id"]);
            for r in f["remedies"].as_array().unwrap() {
                assert!(REMEDIES.contains(&r["id"].as_str().unwrap()), "{name}: {}", r["id"]);
                seen += 1;
            }
        }
    }
    assert!(seen >= 10, "{seen} remedies");
}
