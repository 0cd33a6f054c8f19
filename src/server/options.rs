//! What the server is asked to do, read from SGLang's own flags of the launch: `--host`,
//! `--port`, `--max-queued-requests` and `--log-requests`, which stay in the spec's
//! `extra_flags` as a pasted line leaves them (`launch` serves exactly when a port is among
//! them), and `--served-model-name`, a flag of the spec itself.

use crate::spec::LaunchSpec;

/// SGLang's defaults for `--host` and `--port`.
pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 30000;
/// Requests waiting beside the running one before the server answers 503.
pub const DEFAULT_MAX_QUEUED: usize = 64;

#[derive(Clone, Debug, PartialEq)]
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    /// The name `/v1/models` lists and responses carry: `--served-model-name`, else the
    /// model path as given.
    pub model: String,
    pub max_queued: usize,
    /// Record prompts and answers in the event log (`--log-requests`).
    pub log_requests: bool,
}

impl ServeOptions {
    /// The server a launch asks for: `Some` when the spec has `--port`; a value that does
    /// not parse is an error naming the flag.
    pub fn from_spec(spec: &LaunchSpec) -> Result<Option<ServeOptions>, String> {
        let value = |flag: &str| spec.extra_flags.iter().rev().find(|(f, _)| f == flag).map(|(_, v)| v.as_deref());
        let Some(port) = value("--port") else { return Ok(None) };
        let number = |flag: &str, v: Option<&str>| -> Result<u64, String> {
            let v = v.unwrap_or_default();
            v.trim().parse().map_err(|_| format!("{flag}: expected a number, got {v:?}"))
        };
        let port = u16::try_from(number("--port", port)?).map_err(|_| format!("--port: {} is not a TCP port", port.unwrap_or_default()))?;
        let max_queued = match value("--max-queued-requests") {
            Some(v) => number("--max-queued-requests", v)? as usize,
            None => DEFAULT_MAX_QUEUED,
        };
        let text = |flag: &str| value(flag).flatten().map(str::to_string);
        Ok(Some(ServeOptions {
            host: text("--host").unwrap_or_else(|| DEFAULT_HOST.to_string()),
            port,
            model: spec.served_model_name.clone().or_else(|| spec.model_path.clone()).unwrap_or_default(),
            max_queued,
            log_requests: value("--log-requests").is_some(),
        }))
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pasted_launch_server_line_with_a_port_serves_with_sglangs_defaults_elsewhere() {
        let spec = LaunchSpec::from_command_line("python3 -m sglang.launch_server --model-path /m/t --port 8080 --log-requests").unwrap();
        let o = ServeOptions::from_spec(&spec).unwrap().unwrap();
        assert_eq!(o, ServeOptions { host: "127.0.0.1".into(), port: 8080, model: "/m/t".into(), max_queued: 64, log_requests: true });
        let spec = LaunchSpec::from_command_line(
            "x --model-path /m/t --host 0.0.0.0 --port 30000 --served-model-name smol --max-queued-requests 2",
        )
        .unwrap();
        let o = ServeOptions::from_spec(&spec).unwrap().unwrap();
        assert_eq!((o.address().as_str(), o.model.as_str(), o.max_queued, o.log_requests), ("0.0.0.0:30000", "smol", 2, false));
    }

    #[test]
    fn no_port_no_server_and_a_bad_port_names_the_flag() {
        let spec = LaunchSpec::from_command_line("x --model-path /m/t --host 0.0.0.0").unwrap();
        assert_eq!(ServeOptions::from_spec(&spec), Ok(None));
        let spec = LaunchSpec::from_command_line("x --port 70000").unwrap();
        assert_eq!(ServeOptions::from_spec(&spec), Err("--port: 70000 is not a TCP port".to_string()));
        let spec = LaunchSpec::from_command_line("x --port http").unwrap();
        assert_eq!(ServeOptions::from_spec(&spec), Err("--port: expected a number, got \"http\"".to_string()));
    }
}
