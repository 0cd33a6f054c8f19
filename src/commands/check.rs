//! `specdeck check`: build the launch spec (flags on top of a pasted command line), apply
//! `--apply` remedies, run every rule, print text or JSON, and return the exit status.

use clap::Args;

use super::catalog::known_remedies;
use super::flags::LaunchFlags;
use super::pasted::PastedLine;
use crate::finding::Severity;
use crate::finding_text::{ColorChoice, Paint};
use crate::preflight::apply::{apply_all, ApplyError};
use crate::preflight::check_spec;
use crate::preflight::render;
use crate::preflight::report::Report;

/// Exit status for errors found (and, with `--strict`, for warnings).
const EXIT_ERRORS: i32 = 1;
/// Exit status for inputs that cannot be judged (also an unknown `--apply` id).
const EXIT_UNREADABLE: i32 = 2;

pub const AFTER_HELP: &str = "\
Examples:
  specdeck check --model-path T --speculative-draft-model-path D --speculative-algorithm EAGLE3
  specdeck check --json -- SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python3 -m sglang.launch_server --model-path T ...
  specdeck check --model-path T --speculative-draft-model-path D --apply clamp-context-length

Exit status: 0 no errors (warnings allowed), 1 errors (or warnings, with --strict), 2 unreadable input,
a bad flag value or an --apply id that no finding offers.";

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    flags: LaunchFlags,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Fail on warnings too: exit 1 when any finding is a warning.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    line: PastedLine,
}

pub fn run(args: &CheckArgs, color: ColorChoice) -> anyhow::Result<i32> {
    if let Err(e) = known_remedies(&args.flags.apply) {
        eprintln!("specdeck check: {e}");
        return Ok(EXIT_UNREADABLE);
    }
    let mut spec = args.flags.to_spec(args.line.spec()?)?;
    let applied = match apply_all(&mut spec, &args.flags.apply, check_spec) {
        Ok(applied) => applied,
        Err(e @ ApplyError::Unknown { .. }) => {
            eprintln!("specdeck check: {e}");
            return Ok(EXIT_UNREADABLE);
        }
        Err(e) => return Err(e.into()),
    };
    let mut report = Report::new(check_spec(&spec));
    if args.strict && report.exit == 0 && report.count(Severity::Warning) > 0 {
        report.exit = EXIT_ERRORS;
    }
    // The user's line with the fixes in, once a fix is applied.
    let fixed = (!applied.is_empty()).then(|| spec.fixed_command());
    if args.json {
        for a in &applied {
            eprintln!("specdeck check: {}", a.describe());
        }
        println!("{}", report.check_json(&spec, fixed));
    } else {
        print!("{}", render::text(&report, &spec, &applied, fixed.as_deref(), Paint::for_stdout(color)));
    }
    Ok(report.exit)
}
