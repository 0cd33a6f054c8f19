//! A launch line as the user wrote it: the words before the server (`docker run … -e X=1`,
//! `env X=1`, `X=1`), the server program (`python3 -m sglang.launch_server`, `vllm serve`) and
//! its arguments as typed. `LaunchSpec` keeps it so `fixed_command` can edit the user's own line.
//! Text comes as one string, with backslash-newlines, or as a shell script; the line that runs
//! the server is the one taken.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::SpecError;

/// The server a line starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Server {
    #[default]
    Sglang,
    Vllm,
}

/// One word (or flag and value) of the server's arguments, as typed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LineArg {
    /// The flag as typed (`--tp`, `--speculative-algo`); empty for a positional word.
    pub spelling: String,
    /// What it sets: a `FLAGS` name or another flag's full name; `None` for a word read as no
    /// flag.
    pub sets: Option<String>,
    pub value: Option<String>,
    /// `--flag=value`, one word.
    pub joined: bool,
}

/// The pasted line, and what it set when parsed (so a fix can tell what it changed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LaunchLine {
    pub server: Server,
    /// The words before the server program, as typed (env assignments, `docker run …`).
    pub wrapper: Vec<String>,
    /// `python3 -m sglang.launch_server`, `vllm serve`, …
    pub program: Vec<String>,
    pub args: Vec<LineArg>,
    /// Words after the arguments that belong to the shell (`2>&1 | tee log`), kept as typed.
    pub tail: Vec<String>,
    /// The flags as parsed, (`FLAGS` name, value).
    pub flags: Vec<(String, String)>,
    pub extra_flags: Vec<(String, Option<String>)>,
    /// The environment the line runs in: its own assignments, a script's exports and the
    /// variables inherited from this process.
    pub env: BTreeMap<String, String>,
}

/// A variable set by the wrapper: where, and how it is written.
#[derive(Debug, PartialEq)]
pub struct EnvSlot {
    /// The index of the `NAME=value` text in the wrapper.
    pub at: usize,
    /// Where the text starts in that word (`--env=NAME=v` starts after `--env=`).
    pub offset: usize,
    /// The index of a separate `-e`/`--env` word before it.
    pub flag_at: Option<usize>,
    pub name: String,
    pub value: String,
}

pub fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

fn assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    is_env_name(name).then(|| (name.to_string(), value.to_string()))
}

/// The variables a wrapper sets: `NAME=v` words (leading, or after `env`), and docker's
/// `-e NAME=v`, `--env NAME=v` and `--env=NAME=v`.
pub fn env_slots(wrapper: &[String]) -> Vec<EnvSlot> {
    let mut slots = Vec::new();
    let mut i = 0;
    while i < wrapper.len() {
        let w = &wrapper[i];
        let (at, offset, flag_at) = if (w == "-e" || w == "--env") && i + 1 < wrapper.len() {
            i += 1;
            (i, 0, Some(i - 1))
        } else if let Some(rest) = w.strip_prefix("--env=") {
            (i, w.len() - rest.len(), None)
        } else {
            (i, 0, None)
        };
        if let Some((name, value)) = assignment(&wrapper[at][offset..]) {
            slots.push(EnvSlot { at, offset, flag_at, name, value });
        }
        i += 1;
    }
    slots
}

/// Where the server program starts in `words`, which server it is, and how many words it has.
pub fn find_program(words: &[String]) -> Option<(usize, Server, usize)> {
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    (0..words.len()).find_map(|i| {
        let w = base(&words[i]);
        let next = |n: usize| words.get(i + n).map(String::as_str);
        if w.starts_with("python") && next(1) == Some("-m") {
            return match next(2) {
                Some(m) if m.starts_with("sglang.") => Some((i, Server::Sglang, 3)),
                Some(m) if m.starts_with("vllm.") => Some((i, Server::Vllm, 3)),
                _ => None,
            };
        }
        match (w.as_str(), next(1)) {
            ("vllm", Some("serve")) => Some((i, Server::Vllm, 2)),
            ("sglang", Some("serve")) => Some((i, Server::Sglang, 2)),
            _ => None,
        }
    })
}

/// Shell words that end the server's arguments.
pub fn is_shell_operator(word: &str) -> bool {
    matches!(word, "|" | "||" | "&&" | ";" | "&") || word.starts_with('>') || word.starts_with("2>") || word.starts_with("1>")
}

fn split(line: &str) -> Result<Vec<String>, SpecError> {
    shlex::split(line).ok_or(SpecError::BadQuoting)
}

/// The words of the command that runs the server in `text` (one line, a line with
/// backslash-newlines, or a shell script), with the variables a script exports before it.
pub fn command_words(text: &str) -> Result<(Vec<String>, BTreeMap<String, String>), SpecError> {
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    let mut exports = BTreeMap::new();
    let mut lines = Vec::new();
    for line in joined.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let words = split(line)?;
        if find_program(&words).is_some() {
            return Ok((words, exports));
        }
        if words.first().map(String::as_str) == Some("export") {
            exports.extend(words[1..].iter().filter_map(|w| assignment(w)));
        }
        lines.push(words);
    }
    match lines.len() {
        1 => Ok((lines.pop().expect("one line"), exports)),
        _ => Err(SpecError::NoServerLine),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        shlex::split(s).unwrap()
    }

    #[test]
    fn the_three_docker_spellings_and_bare_assignments_are_env() {
        let w = words("docker run --gpus all -e A=1 --env B=2 --env=C=3 -e HOST_VAR --ipc=host img:tag");
        let got: Vec<(String, String, Option<usize>)> = env_slots(&w).into_iter().map(|s| (s.name, s.value, s.flag_at)).collect();
        assert_eq!(got, vec![("A".into(), "1".into(), Some(4)), ("B".into(), "2".into(), Some(6)), ("C".into(), "3".into(), None)]);
        let w = words("env CUDA_VISIBLE_DEVICES=0,1 X=y");
        assert_eq!(env_slots(&w).iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["CUDA_VISIBLE_DEVICES", "X"]);
    }

    #[test]
    fn the_program_is_found_after_any_wrapper() {
        assert_eq!(find_program(&words("docker run img python3 -m sglang.launch_server --tp 2")), Some((3, Server::Sglang, 3)));
        assert_eq!(find_program(&words("/opt/venv/bin/vllm serve org/m")), Some((0, Server::Vllm, 2)));
        assert_eq!(find_program(&words("python -m vllm.entrypoints.openai.api_server --model m")), Some((0, Server::Vllm, 3)));
        assert_eq!(find_program(&words("python train.py --model-path m")), None);
    }

    #[test]
    fn a_script_gives_its_server_line_and_exports() {
        let script = "#!/bin/bash\nset -euo pipefail\n# the server\nexport HF_HOME=/data/hf SGLANG_X=1\ncd /srv\n\
                      python3 -m sglang.launch_server \\\n  --model-path m \\\n  --tp 2 2>&1 | tee log\necho done\n";
        let (w, env) = command_words(script).unwrap();
        assert_eq!(w[..5], words("python3 -m sglang.launch_server --model-path m")[..]);
        assert_eq!(env.into_iter().collect::<Vec<_>>(), [("HF_HOME".into(), "/data/hf".into()), ("SGLANG_X".into(), "1".into())]);
        assert_eq!(command_words("set -e\necho hi\n").unwrap_err(), SpecError::NoServerLine);
    }
}
