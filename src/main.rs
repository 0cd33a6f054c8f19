use specdeck::commands;

fn main() {
    restore_sigpipe();
    match commands::run_from_args() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Errors quote paths and values from files: their control characters are escaped.
            eprintln!("specdeck: {}", specdeck::finding_text::escaped_keeping_lines(&format!("{e:#}")));
            std::process::exit(2);
        }
    }
}

/// The Rust runtime ignores SIGPIPE, so a write to a closed stdout (`specdeck check | true`)
/// becomes an error that `println!` turns into a panic. With the default disposition back,
/// the process ends quietly of SIGPIPE, as other command-line tools do.
fn restore_sigpipe() {
    // SAFETY: called first thing in main, before any other thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
