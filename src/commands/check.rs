//! `specdeck check`: build the launch spec (flags on top of a pasted command line), apply
//! `--apply` remedies, run every rule, print text or JSON, and return the exit status.

use clap::Args;

use super::flags::LaunchFlags;
use super::pasted::PastedLine;
use crate::finding_text::Paint;
use crate::preflight::apply::{apply_all, ApplyError};
use crate::preflight::check_spec;
use crate::preflight::render;
use crate::preflight::report::Report;

/// Exit status for inputs that cannot be judged (also an unknown `--apply` id).
const EXIT_UNREADABLE: i32 = 2;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    flags: LaunchFlags,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    line: PastedLine,
}

pub fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    let mut spec = args.flags.to_spec(args.line.spec()?)?;
    let applied = match apply_all(&mut spec, &args.flags.apply, check_spec) {
        Ok(applied) => applied,
        Err(e @ ApplyError::Unknown { .. }) => {
            eprintln!("specdeck check: {e}");
            return Ok(EXIT_UNREADABLE);
        }
        Err(e) => return Err(e.into()),
    };
    let report = Report::new(check_spec(&spec));
    // The user's line with the fixes in, once a fix is applied.
    let fixed = (!applied.is_empty()).then(|| spec.fixed_command());
    if args.json {
        for a in &applied {
            eprintln!("specdeck check: {}", a.describe());
        }
        println!("{}", report.check_json(&spec, fixed));
    } else {
        print!("{}", render::text(&report, &spec, &applied, fixed.as_deref(), Paint::for_stdout()));
    }
    Ok(report.exit)
}
