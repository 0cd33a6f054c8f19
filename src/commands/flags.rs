//! The launch flags shared by `check`, `launch`, `generate` and `bench`, built with clap's
//! builder API over the one flag table (`spec::FLAGS`), and the launch spec they describe.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

use crate::spec::{FlagDef, LaunchSpec, SpecError, FLAGS};

const APPLY: &str = "apply";

/// The flags as given on the command line.
#[derive(Clone, Debug, Default)]
pub struct LaunchFlags {
    /// (canonical flag, value) in `FLAGS` order; a switch given has an empty value.
    given: Vec<(&'static str, String)>,
    /// `--apply FIX_ID`, in order.
    pub apply: Vec<String>,
}

/// A flag's clap id: its name without the dashes.
fn id(def: &FlagDef) -> &'static str {
    def.name.trim_start_matches("--")
}

fn arg(def: &'static FlagDef) -> Arg {
    let arg = Arg::new(id(def)).long(id(def)).aliases(def.aliases.iter().map(|a| a.trim_start_matches("--")));
    let arg = if def.help.is_empty() { arg } else { arg.help(def.help) };
    if def.is_switch() {
        arg.action(ArgAction::SetTrue)
    } else {
        arg.value_name(def.value_name).action(ArgAction::Set)
    }
}

impl Args for LaunchFlags {
    fn augment_args(cmd: Command) -> Command {
        let apply = Arg::new(APPLY)
            .long(APPLY)
            .value_name("FIX_ID")
            .action(ArgAction::Append)
            .help("Apply a remedy by its id (repeatable), then continue");
        FLAGS.iter().fold(cmd, |cmd, def| cmd.arg(arg(def))).arg(apply)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for LaunchFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = LaunchFlags::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.given = FLAGS
            .iter()
            .filter_map(|def| {
                if def.is_switch() {
                    matches.get_flag(id(def)).then(|| (def.name, String::new()))
                } else {
                    matches.get_one::<String>(id(def)).map(|v| (def.name, v.clone()))
                }
            })
            .collect();
        self.apply = matches.get_many::<String>(APPLY).map(|ids| ids.cloned().collect()).unwrap_or_default();
        Ok(())
    }
}

impl LaunchFlags {
    /// Whether no launch flag (nor `--apply`) was given.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty() && self.apply.is_empty()
    }

    /// Build a spec: the flags given, on top of `base` (a pasted command line, or empty),
    /// with `SGLANG_*` variables of this process's environment added.
    pub fn to_spec(&self, base: LaunchSpec) -> Result<LaunchSpec, SpecError> {
        let mut spec = base;
        for (flag, value) in &self.given {
            spec.set_flag(flag, value)?;
        }
        for (k, v) in std::env::vars() {
            if k.starts_with("SGLANG_") {
                spec.inherit_env(&k, &v);
            }
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Algorithm;

    #[derive(clap::Parser)]
    struct Line {
        #[command(flatten)]
        flags: LaunchFlags,
    }

    fn parse(words: &[&str]) -> Result<LaunchFlags, clap::Error> {
        use clap::Parser;
        Line::try_parse_from(std::iter::once("specdeck").chain(words.iter().copied())).map(|l| l.flags)
    }

    #[test]
    fn every_flag_of_the_table_and_its_aliases_parse_as_the_pasted_parser_reads_them() {
        let mut words = Vec::new();
        let values = [
            "/t", "/d", "EAGLE3", "2", "4096", "3", "1", "4", "bfloat16", "0.8", "16", "8", "64", "fa3", "triton", "fp8_e4m3", "fp8",
            "unquant", "2", "4", "8192", "100000", "served", "main", "abc1234", "80", "cpu", "1.5",
        ];
        let mut values = values.iter();
        for def in FLAGS {
            words.push(def.name.to_string());
            if !def.is_switch() {
                words.push(values.next().unwrap().to_string());
            }
        }
        assert_eq!(values.next(), None, "a value for every flag of the table");
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let flags = parse(&words).unwrap();
        assert_eq!(flags.to_spec(LaunchSpec::default()).unwrap().flags(), LaunchSpec::from_words(&words).unwrap().flags());
        assert_eq!(flags.given.len(), FLAGS.len());

        for def in FLAGS.iter().filter(|d| !d.aliases.is_empty()) {
            for alias in def.aliases {
                let given = parse(&[alias, "7"]).unwrap().given;
                assert_eq!(given, [(def.name, "7".to_string())], "{alias}");
            }
        }
    }

    #[test]
    fn apply_repeats_and_the_spec_layers_the_flags_over_a_pasted_line() {
        let flags = parse(&["--tp", "4", "--apply", "a", "--apply", "b", "--enable-deterministic-inference"]).unwrap();
        assert_eq!(flags.apply, ["a", "b"]);
        let base = LaunchSpec::from_words(&["--tp-size", "2", "--speculative-algorithm", "EAGLE3"]).unwrap();
        let spec = flags.to_spec(base).unwrap();
        assert_eq!((spec.tp_size, spec.speculative_algorithm, spec.deterministic), (Some(4), Some(Algorithm::Eagle3), true));
        let err = parse(&["--tp-size", "eight"]).unwrap().to_spec(LaunchSpec::default()).unwrap_err();
        assert_eq!(err.to_string(), "--tp-size: expected a positive integer, got \"eight\"");
    }
}
