//! `fixed_command`: the user's own launch line with the spec's changes edited in. Their
//! program words, flag spellings and order, every other flag and variable and any docker
//! wrapper stay; a changed value is replaced where it stands, a new flag goes at the end, a
//! new variable where the line sets its others, a removed one goes. What no flag or variable
//! can say (an in-memory override of the drafter's config) follows as a shell comment.

use std::collections::BTreeSet;

use serde_json::Value;

use super::line::{env_slots, LaunchLine, LineArg, Server};
use super::vllm::{json_text, vllm_flag, SPECULATIVE_CONFIG, SPECULATIVE_KEYS};
use super::{find_flag, LaunchSpec, ALLOW_LONGER_CONTEXT_ENV, SPECDECK_ONLY};

/// A word as a shell reads it back: bare when it has no character a shell treats specially
/// (`NAME=v`, `--tp=2` stay as typed), else quoted.
fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    shlex::try_quote(word).map(|q| q.into_owned()).unwrap_or_else(|_| word.to_string())
}

/// `--flag value`, `--flag=value` or a switch's `--flag`, quoted for a shell.
fn flag_words(spelling: &str, value: Option<&str>, joined: bool) -> Vec<String> {
    match value {
        None | Some("") => vec![quote(spelling)],
        Some(v) if spelling.is_empty() => vec![quote(v)],
        Some(v) if joined => vec![quote(&format!("{spelling}={v}"))],
        Some(v) => vec![quote(spelling), quote(v)],
    }
}

/// The line a spec without a pasted one stands for.
fn default_line() -> LaunchLine {
    LaunchLine { program: ["python3", "-m", "sglang.launch_server"].map(String::from).to_vec(), ..LaunchLine::default() }
}

impl LaunchSpec {
    /// The value `flag` (a `FLAGS` name or an extra flag) has now: `None` when unset, an empty
    /// value for a switch that is on.
    fn current(&self, flag: &str) -> Option<Option<String>> {
        match find_flag(flag) {
            Some(def) => def.value_in(self).map(Some),
            None => self.extra_flags.iter().find(|(f, _)| f == flag).map(|(_, v)| v.clone()),
        }
    }

    /// The user's launch line with this spec's changes edited in (see the module comment);
    /// without a pasted line, SGLang's launch command for the spec.
    pub fn fixed_command(&self) -> String {
        let fallback = default_line();
        let line = self.line.as_ref().unwrap_or(&fallback);
        let parsed = |flag: &str| -> Option<Option<String>> {
            match find_flag(flag) {
                Some(_) => line.flags.iter().find(|(f, _)| f == flag).map(|(_, v)| Some(v.clone())),
                None => line.extra_flags.iter().find(|(f, _)| f == flag).map(|(_, v)| v.clone()),
            }
        };
        let mut comments = Vec::new();
        let mut seen = BTreeSet::new();
        let mut args = Vec::new();
        for arg in &line.args {
            let Some(sets) = arg.sets.as_deref() else {
                args.extend(flag_words("", arg.value.as_deref(), false));
                continue;
            };
            if line.server == Server::Vllm && sets == SPECULATIVE_CONFIG {
                args.extend(self.speculative_config(arg, &mut seen));
                continue;
            }
            seen.insert(sets.to_string());
            match self.current(sets) {
                None => {}
                Some(now) if Some(&now) == parsed(sets).as_ref() => {
                    args.extend(flag_words(&arg.spelling, arg.value.as_deref(), arg.joined))
                }
                Some(now) => args.extend(flag_words(&arg.spelling, now.as_deref(), arg.joined)),
            }
        }
        let set_now = self.flags().into_iter().map(|(f, v)| (f.to_string(), Some(v))).chain(self.extra_flags.iter().cloned());
        for (flag, value) in set_now.filter(|(f, _)| !seen.contains(f) && !SPECDECK_ONLY.contains(&f.as_str())) {
            match line.server {
                Server::Sglang => args.extend(flag_words(&flag, value.as_deref(), false)),
                Server::Vllm => match vllm_flag(&flag) {
                    Some(v) => args.extend(flag_words(v, value.as_deref(), false)),
                    None if find_flag(&flag).is_some() => {
                        comments.push(format!("# {flag} {}: vLLM has no flag for this", value.unwrap_or_default()))
                    }
                    None => args.extend(flag_words(&flag, value.as_deref(), false)),
                },
            }
        }
        let mut words = self.fixed_wrapper(line, &mut comments);
        words.extend(line.program.iter().map(|w| quote(w)));
        words.extend(args);
        words.extend(line.tail.iter().cloned());
        for (key, value) in &self.draft_overrides {
            comments.push(format!(
                "# and the drafter's config.json {key} = {value}: no flag overrides the drafter's config (SGLang's \
                 --json-model-override-args is the target's); with {ALLOW_LONGER_CONTEXT_ENV}=1 SGLang runs the drafter \
                 at the target's context itself"
            ));
        }
        std::iter::once(words.join(" ")).chain(comments).collect::<Vec<_>>().join("\n")
    }

    /// The wrapper words with the environment's changes: values edited where they are set,
    /// removed ones dropped, new ones after `docker run` (as `-e NAME=v`) or in front.
    fn fixed_wrapper(&self, line: &LaunchLine, comments: &mut Vec<String>) -> Vec<String> {
        let mut words: Vec<Option<String>> = line.wrapper.iter().cloned().map(Some).collect();
        let slots = env_slots(&line.wrapper);
        for slot in &slots {
            match self.env.get(&slot.name) {
                None => {
                    words[slot.at] = None;
                    if let Some(flag) = slot.flag_at {
                        words[flag] = None;
                    }
                }
                Some(v) if *v == slot.value => {}
                Some(v) => words[slot.at] = Some(format!("{}{}={v}", &line.wrapper[slot.at][..slot.offset], slot.name)),
            }
        }
        for name in line.env.keys().filter(|k| !self.env.contains_key(*k) && !slots.iter().any(|s| &s.name == *k)) {
            comments.push(format!("# unset {name} before running this (the script exports it)"));
        }
        let added: Vec<String> = self
            .env
            .iter()
            .filter(|(k, v)| line.env.get(*k) != Some(v) && !slots.iter().any(|s| &s.name == *k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let docker_run =
            line.wrapper.iter().position(|w| w == "docker").and_then(|d| line.wrapper[d..].iter().position(|w| w == "run").map(|r| d + r));
        let mut out: Vec<String> = Vec::new();
        if docker_run.is_none() {
            out.extend(added.iter().map(|a| quote(a)));
        }
        for (i, word) in words.into_iter().enumerate() {
            if let Some(w) = word {
                out.push(quote(&w));
            }
            if Some(i) == docker_run {
                out.extend(added.iter().flat_map(|a| ["-e".to_string(), quote(a)]));
            }
        }
        out
    }

    /// vLLM's `--speculative-config` with the keys specdeck reads set to the spec's values.
    fn speculative_config(&self, arg: &LineArg, seen: &mut BTreeSet<String>) -> Vec<String> {
        let mut config: serde_json::Map<String, Value> =
            arg.value.as_deref().and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default();
        for (key, flag) in SPECULATIVE_KEYS {
            seen.insert(flag.to_string());
            let was = config.get(*key).map(json_text);
            let now = find_flag(flag).and_then(|def| def.value_in(self));
            if *key == "method" && now.is_some() == was.is_some() {
                continue; // vLLM's method names are its own; the spec cannot change them to another
            }
            match now {
                None => {
                    config.remove(*key);
                }
                Some(v) if Some(&v) != was.as_ref() => {
                    let v = if *key == "method" { v.to_ascii_lowercase() } else { v };
                    let value = v.parse::<u64>().map(Value::from).unwrap_or(Value::String(v));
                    config.insert(key.to_string(), value);
                }
                Some(_) => {}
            }
        }
        flag_words(&arg.spelling, Some(&Value::Object(config).to_string()), arg.joined)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SpecChange;

    fn fixed(line: &str, changes: &[SpecChange]) -> String {
        let mut spec = LaunchSpec::from_command_line(line).unwrap();
        spec.apply_remedy("fix", changes).unwrap();
        spec.fixed_command()
    }

    fn set(flag: &str, value: &str) -> SpecChange {
        SpecChange::SetFlag { flag: flag.into(), value: value.into() }
    }

    #[test]
    fn an_unchanged_line_comes_back_as_typed() {
        let line = "CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model m --tp=2 --speculative-algo EAGLE3 --trust-remote-code --host 0.0.0.0";
        assert_eq!(fixed(line, &[]), line);
    }

    #[test]
    fn changed_values_stay_in_place_and_new_flags_go_last() {
        let line = "python3 -m sglang.launch_server --model m --context-length 262144 --tp=2 --page-size 64 --port 30000";
        assert_eq!(
            fixed(
                line,
                &[
                    set("--context-length", "131072"),
                    set("--tp-size", "4"),
                    SpecChange::UnsetFlag { flag: "--page-size".into() },
                    set("--speculative-num-steps", "3")
                ]
            ),
            "python3 -m sglang.launch_server --model m --context-length 131072 --tp=4 --port 30000 --speculative-num-steps 3"
        );
    }

    #[test]
    fn env_is_edited_where_it_is_set_and_added_to_the_docker_wrapper() {
        let allow = SpecChange::SetEnv { name: ALLOW_LONGER_CONTEXT_ENV.into(), value: "1".into() };
        let line = "docker run --gpus all -e HF_TOKEN=x --env=NCCL_DEBUG=WARN lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path m";
        assert_eq!(
            fixed(line, &[allow.clone(), SpecChange::SetEnv { name: "NCCL_DEBUG".into(), value: "INFO".into() }]),
            format!(
                "docker run -e {ALLOW_LONGER_CONTEXT_ENV}=1 --gpus all -e HF_TOKEN=x --env=NCCL_DEBUG=INFO lmsysorg/sglang:latest python3 -m \
                 sglang.launch_server --model-path m"
            )
        );
        assert_eq!(
            fixed(
                "SGLANG_TYPO=1 python3 -m sglang.launch_server --model-path m",
                &[allow, SpecChange::UnsetEnv { name: "SGLANG_TYPO".into() }]
            ),
            format!("{ALLOW_LONGER_CONTEXT_ENV}=1 python3 -m sglang.launch_server --model-path m")
        );
    }

    #[test]
    fn a_drafter_override_is_said_in_a_comment() {
        let got = fixed(
            "python3 -m sglang.launch_server --model-path m",
            &[SpecChange::OverrideDraftConfig { key: "/max_position_embeddings".into(), value: 262144.into() }],
        );
        assert_eq!(
            got.lines().collect::<Vec<_>>(),
            [
                "python3 -m sglang.launch_server --model-path m",
                "# and the drafter's config.json /max_position_embeddings = 262144: no flag overrides the drafter's config \
                 (SGLang's --json-model-override-args is the target's); with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 \
                 SGLang runs the drafter at the target's context itself"
            ]
        );
    }

    #[test]
    fn vllm_lines_are_edited_in_vllm_names() {
        let line = r#"vllm serve /t --max-model-len 65536 --speculative-config '{"model": "/d", "num_speculative_tokens": 5, "method": "eagle3"}'"#;
        assert_eq!(
            fixed(line, &[set("--context-length", "2048"), set("--speculative-num-steps", "3"), set("--tp-size", "2"), set("--page-size", "1")]),
            "vllm serve /t --max-model-len 2048 --speculative-config '{\"model\":\"/d\",\"num_speculative_tokens\":3,\"method\":\"eagle3\"}' \
             --tensor-parallel-size 2\n# --page-size 1: vLLM has no flag for this"
        );
    }

    #[test]
    fn without_a_pasted_line_the_command_is_sglangs() {
        let mut spec = LaunchSpec::default();
        spec.set_flag("--model-path", "/m").unwrap();
        spec.set_flag("--gpu-memory-gib", "80").unwrap();
        spec.env.insert("SGLANG_X".into(), "1".into());
        assert_eq!(spec.fixed_command(), "SGLANG_X=1 python3 -m sglang.launch_server --model-path /m");
    }
}
