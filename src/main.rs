use specdeck::commands;

fn main() {
    restore_sigpipe();
    match commands::run_from_args() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Errors quote paths and values from files: their control characters are escaped.
            eprintln!("specdeck: {}", specdeck::finding_text::escaped_keeping_lines(&chain_text(&e)));
            std::process::exit(2);
        }
    }
}

/// `e` and its causes, `: `-joined as `{e:#}` is, but a cause is left out when the message
/// before it already ends with it (an error that prints its source itself), so no reason is
/// said twice.
fn chain_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1).map(|c| c.to_string()) {
        if !text.ends_with(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
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
