//! End to end in a real terminal: the `specdeck` binary inside tmux, driven with
//! send-keys and read with capture-pane. When tmux is missing these tests say so loudly on
//! stderr (CI has tmux).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_specdeck");
const PROMPT: &str = "e2e$ ";

fn tmux_present() -> bool {
    let found = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("\n!!! SKIPPED: tmux is not installed; the end-to-end console test did not run !!!\n");
    }
    found
}

/// A tmux server of our own (private socket), one pane running a plain shell.
struct Tmux {
    socket: String,
    dir: tempfile::TempDir,
}

impl Tmux {
    fn start(width: u16, height: u16) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = format!("specdeck-e2e-{}-{}", std::process::id(), dir.path().file_name().unwrap().to_string_lossy());
        let tmux = Tmux { socket, dir };
        let shell =
            format!("env -i PATH=/usr/bin:/bin HOME={} TERM=screen-256color PS1='{PROMPT}' bash --norc --noprofile", tmux.home().display());
        tmux.run(&["new-session", "-d", "-s", "e2e", "-x", &width.to_string(), "-y", &height.to_string(), &shell]);
        tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| s.contains(PROMPT.trim_end()));
        tmux
    }

    /// A fresh HOME, so the demo extracts into a clean cache and no user keymap applies.
    fn home(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("tmux runs");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "e2e"])
    }

    fn pane_flag(&self, name: &str) -> String {
        self.run(&["display-message", "-p", "-t", "e2e", &format!("#{{{name}}}")]).trim().to_string()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "e2e"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    fn type_line(&self, line: &str) {
        self.keys(&["-l", line]);
        self.keys(&["Enter"]);
    }

    fn wait_for(&self, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).output();
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn demo_diagnosis_fix_relaunch_generate_and_quit_in_tmux() {
    if !tmux_present() {
        return;
    }
    let tmux = Tmux::start(120, 40);
    let stty_before = tmux.home().join("stty.before");
    let log = tmux.home().join("events.jsonl");
    // From a folder with no testdata: the demo must come from the binary itself.
    tmux.type_line(&format!("cd {} && stty -g > {}", path_str(&tmux.home()), path_str(&stty_before)));
    tmux.type_line(&format!("{BIN} --event-log {}", path_str(&log)));
    let screen = tmux.wait_for("the diagnosis", Duration::from_secs(60), |s| {
        s.contains("Diagnosis · context-length-exceeds-draft") && s.contains("clamp-context-length")
    });
    // Both evidence lines are marked (they may wrap before the value in a narrow column).
    assert_eq!(screen.matches("▶\"max_position_embeddings\":").count(), 2, "{screen}");
    assert!(screen.contains("262144,") && screen.contains("131072,"), "{screen}");
    assert_eq!(tmux.pane_flag("alternate_on"), "1");

    // A resize (an SSH client's window change) redraws the console at the new size.
    tmux.run(&["resize-window", "-t", "e2e", "-x", "80", "-y", "24"]);
    let screen = tmux.wait_for("a redraw at 80x24", Duration::from_secs(10), |s| {
        let lines: Vec<&str> = s.lines().collect();
        lines.len() == 24 && lines[0].chars().count() == 80 && lines[0].ends_with('┐') && s.contains("press 1 to fix")
    });
    assert!(screen.contains("clamp-context-length"), "{screen}");
    tmux.run(&["resize-window", "-t", "e2e", "-x", "120", "-y", "40"]);

    tmux.keys(&["1"]);
    let screen = tmux.wait_for("ready and streamed tokens", Duration::from_secs(120), |s| {
        s.contains("✓ ready") && s.contains("cold start") && s.contains(" tok/s · accept ")
    });
    assert!(screen.contains("Phases · relaunch #1"), "{screen}");

    // A prompt with q, r and digits in it is typed and sent, not read as keys.
    tmux.keys(&["i"]);
    tmux.wait_for("the prompt mode", Duration::from_secs(10), |s| s.contains(" INSERT ") && s.contains("esc leave"));
    tmux.keys(&["C-u"]);
    tmux.keys(&["-l", "q r 12"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the typed prompt sent", Duration::from_secs(60), |s| s.contains("> q r 12") && s.contains(" · done"));
    assert!(screen.contains("Phases · relaunch #1") && screen.contains(" INSERT "), "no relaunch, no fix, no quit: {screen}");
    tmux.keys(&["Escape"]);
    tmux.wait_for("the prompt left", Duration::from_secs(10), |s| !s.contains(" INSERT "));

    // A paste is never read as keys: its q does not quit.
    tmux.run(&["set-buffer", "-b", "blob", "q\nqqq 1 r q"]);
    tmux.run(&["paste-buffer", "-p", "-b", "blob", "-t", "e2e"]);
    std::thread::sleep(Duration::from_millis(1500));
    let screen = tmux.screen();
    assert_eq!(tmux.pane_flag("alternate_on"), "1", "the paste did not quit: {screen}");
    assert!(screen.contains("Phases · relaunch #1"), "the paste did not relaunch: {screen}");

    // y copies the fixed command to the state dir's file (and by OSC 52 to the terminal).
    tmux.keys(&["y"]);
    let fixed = tmux.home().join(".local/state/specdeck/fixed-command.sh");
    tmux.wait_for("the copy's notice", Duration::from_secs(10), |s| s.contains("~/.local/state/specdeck/fixed-command.sh"));
    assert!(std::fs::read_to_string(&fixed).unwrap().contains("--context-length 131072"));

    tmux.keys(&["q"]);
    let screen = tmux.wait_for("the shell prompt after quitting", Duration::from_secs(20), |s| s.trim_end().ends_with(PROMPT.trim_end()));
    assert!(screen.contains("specdeck: the fixed command (clamp-context-length):"), "printed on exit: {screen}");
    assert_eq!(tmux.pane_flag("alternate_on"), "0", "the alternate screen was left");
    assert_eq!(tmux.pane_flag("cursor_flag"), "1", "the cursor is visible again");
    tmux.type_line(&format!("stty -g | cmp -s - {} && echo TERMINAL-RESTORED", path_str(&stty_before)));
    tmux.wait_for("the terminal modes restored", Duration::from_secs(10), |s| s.contains("\nTERMINAL-RESTORED"));

    let events = std::fs::read_to_string(&log).unwrap();
    assert!(events.contains(r#""type":"remedy-applied","id":"clamp-context-length""#), "{events}");
    // The seed's story: a Kimi-K2.5 target (its context under text_config) with a drafter
    // trained for half of it, caught before any weight moved, so the fixed relaunch loads the
    // target once; its EAGLE-3 drafter then reads the inputs of target layers 1, 3 and 5.
    assert!(events.contains(r#""key":"/text_config/max_position_embeddings","value":262144"#), "{events}");
    assert!(events.contains(r#""key":"/architectures/0","value":"KimiK25ForConditionalGeneration""#), "{events}");
    assert_eq!(events.matches(r#""phase":"target-load","state":"started""#).count(), 1, "{events}");
    assert!(events.contains("EAGLE-3 capture: inputs of target layers [1, 3, 5]"), "{events}");
    assert!(events.contains(r#""text":"q r 12""#), "the typed prompt was sent: {events}");
    assert!(events.lines().last().unwrap().contains(r#""type":"exit""#), "the engine shut down cleanly");
}

#[test]
fn a_lost_terminal_tears_the_session_down() {
    if !tmux_present() {
        return;
    }
    let tmux = Tmux::start(100, 30);
    let log = tmux.home().join("events.jsonl");
    tmux.type_line(&format!("cd {} && exec {BIN} --event-log {}", path_str(&tmux.home()), path_str(&log)));
    tmux.wait_for("the diagnosis", Duration::from_secs(60), |s| s.contains("clamp-context-length"));
    let pid: u32 = tmux.pane_flag("pane_pid").parse().unwrap();
    // Closing the pane hangs up its terminal (SIGHUP), as a dropped SSH connection does.
    tmux.run(&["kill-pane", "-t", "e2e"]);
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "specdeck still running 10 s after SIGHUP");
        std::thread::sleep(Duration::from_millis(50));
    }
    let events = std::fs::read_to_string(&log).unwrap();
    assert!(events.lines().last().unwrap().contains(r#""type":"exit""#), "the engine was shut down: {events}");
}

#[test]
fn without_a_tty_the_demo_prints_the_diagnosis_and_the_apply_hint() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(BIN).args(args).current_dir(home.path()).env("HOME", home.path()).env_remove("XDG_CACHE_HOME").output().unwrap()
    };
    let out = run(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("\nerror[context-length-exceeds-draft] at drafter-init\n"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --apply clamp-context-length"));
    let out = run(&["--apply", "clamp-context-length"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("applied remedy clamp-context-length"), "{stdout}");
    assert!(stdout.contains("--- generated ---"), "{stdout}");
}

/// `q` and Ctrl-C during a generation of 4000 tokens on the demo target: the console cancels
/// it at the next step and is gone, the terminal restored, within a second (issue 23).
#[test]
fn quitting_during_a_long_generation_takes_under_a_second() {
    if !tmux_present() {
        return;
    }
    let target = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/demo/target");
    for key in ["q", "C-c"] {
        let tmux = Tmux::start(120, 40);
        tmux.type_line(&format!(
            "{BIN} launch --model-path {target} --context-length 8192 --prompt ROMEO: --max-new-tokens 4000; echo EXIT=$?"
        ));
        let screen = tmux.wait_for("a generation under way", Duration::from_secs(120), |s| s.contains(" · generating…"));
        assert!(!screen.contains("EXIT="), "{screen}");
        tmux.keys(&[key]);
        let sent = Instant::now();
        // The typed command line holds `EXIT=$?` too: wait for the line the shell prints.
        let screen = tmux.wait_for("the shell after quitting", Duration::from_secs(30), |s| s.lines().any(|l| l.starts_with("EXIT=")));
        let took = sent.elapsed();
        eprintln!("{key}: the shell is back {took:?} after the key");
        assert!(took < Duration::from_secs(1), "{key}: {took:?} from the key to the shell; the screen:\n{screen}");
        // `q` quits; Ctrl-C interrupts, with the shell's status for it.
        let status = if key == "q" { "EXIT=0" } else { "EXIT=130" };
        assert!(screen.lines().any(|l| l == status), "{key}: {screen}");
        assert_eq!(tmux.pane_flag("alternate_on"), "0", "{key}: the alternate screen was left");
    }
}
