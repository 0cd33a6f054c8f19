use specdeck::commands;

fn main() {
    match commands::run_from_args() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("specdeck: {e:#}");
            std::process::exit(2);
        }
    }
}
