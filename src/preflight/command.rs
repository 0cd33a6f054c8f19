//! `specdeck check`: build the launch spec (flags on top of a pasted command line), apply
//! `--apply` remedies, run every rule, print text or JSON, and return the exit status.

use crate::cli::CheckArgs;
use crate::preflight::apply::{apply_all, ApplyError};
use crate::preflight::check_spec;
use crate::preflight::render::{self, Paint};
use crate::preflight::report::Report;
use crate::spec::LaunchSpec;

/// Exit status for inputs that cannot be judged (also an unknown `--apply` id).
const EXIT_UNREADABLE: i32 = 2;

pub fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    let pasted = LaunchSpec::from_words(&args.command)?;
    let mut spec = args.flags.to_spec(pasted)?;
    let applied = match apply_all(&mut spec, &args.flags.apply, check_spec) {
        Ok(applied) => applied,
        Err(e @ ApplyError::Unknown { .. }) => {
            eprintln!("specdeck check: {e}");
            return Ok(EXIT_UNREADABLE);
        }
        Err(e) => return Err(e.into()),
    };
    let report = Report::new(check_spec(&spec));
    if args.json {
        for a in &applied {
            eprintln!("specdeck check: {}", a.describe());
        }
        println!("{}", report.to_json());
    } else {
        print!("{}", render::text(&report, &spec, &applied, Paint::for_stdout()));
    }
    Ok(report.exit)
}
