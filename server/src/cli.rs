//! The command line and its environment variables: each flag falls back to
//! its `POLYLIMIT_*` variable, then to its default.

use std::net::SocketAddr;

pub const USAGE: &str = "\
usage: polylimit-server --rules FILE [--grpc ADDR] [--http ADDR] [--domain NAME] [--check]

  --rules FILE    the rules file (env POLYLIMIT_RULES)
  --grpc ADDR     Envoy rate-limit service address (env POLYLIMIT_GRPC_ADDR, default 0.0.0.0:8081)
  --http ADDR     HTTP check/health/metrics address (env POLYLIMIT_HTTP_ADDR, default 0.0.0.0:8080)
  --domain NAME   the only domain the gRPC service answers (env POLYLIMIT_DOMAIN, default polylimit)
  --check         validate the rules file: print \"ok\" and exit 0, or the error and exit 1
";

/// What the server was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub rules: String,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub domain: String,
    pub check: bool,
    /// `POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK=1` (tests only): a call may set
    /// its decision's `now_ms` (gRPC metadata `x-polylimit-now-ms`, /check
    /// header `X-Polylimit-Now-Ms`); otherwise those are ignored.
    pub trust_client_clock: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Run(Config),
    Help,
}

/// Parses `args` (without the program name), reading defaults through `env`.
pub fn parse(args: impl IntoIterator<Item = String>, env: impl Fn(&str) -> Option<String>) -> Result<Command, String> {
    let (mut rules, mut grpc, mut http, mut domain, mut check) = (None, None, None, None, false);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg, None),
        };
        let slot = match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--check" if inline.is_none() => {
                check = true;
                continue;
            }
            "--rules" => &mut rules,
            "--grpc" => &mut grpc,
            "--http" => &mut http,
            "--domain" => &mut domain,
            _ => return Err(format!("unknown argument {flag:?}")),
        };
        let value = match inline.or_else(|| args.next()) {
            Some(v) => v,
            None => return Err(format!("{flag} needs a value")),
        };
        *slot = Some(value);
    }
    let pick = |flag: Option<String>, var: &str| flag.or_else(|| env(var)).filter(|v| !v.is_empty());
    let rules = pick(rules, "POLYLIMIT_RULES").ok_or("--rules FILE (or POLYLIMIT_RULES) is required")?;
    let addr = |flag: Option<String>, var: &str, name: &str, default: &str| -> Result<SocketAddr, String> {
        let text = pick(flag, var).unwrap_or_else(|| default.to_string());
        text.parse()
            .map_err(|_| format!("{name} {text:?} is not an address like 0.0.0.0:8081"))
    };
    Ok(Command::Run(Config {
        rules,
        grpc: addr(grpc, "POLYLIMIT_GRPC_ADDR", "--grpc", "0.0.0.0:8081")?,
        http: addr(http, "POLYLIMIT_HTTP_ADDR", "--http", "0.0.0.0:8080")?,
        domain: pick(domain, "POLYLIMIT_DOMAIN").unwrap_or_else(|| "polylimit".into()),
        check,
        trust_client_clock: env("POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK").as_deref() == Some("1"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Command, String> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        parse(args.iter().map(|s| s.to_string()), |k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn flags_then_env_then_defaults() {
        let Ok(Command::Run(c)) = run(
            &["--rules", "r.yaml", "--grpc=127.0.0.1:0"],
            &[("POLYLIMIT_DOMAIN", "edge")],
        ) else {
            panic!("not a run")
        };
        assert_eq!(c.rules, "r.yaml");
        assert_eq!(c.grpc.to_string(), "127.0.0.1:0");
        assert_eq!(c.http.to_string(), "0.0.0.0:8080");
        assert_eq!(c.domain, "edge");
        assert!(!c.check);
        assert!(!c.trust_client_clock);
        let Ok(Command::Run(c)) = run(&["--check"], &[("POLYLIMIT_RULES", "x.yaml")]) else {
            panic!("not a run")
        };
        assert_eq!((c.rules.as_str(), c.check), ("x.yaml", true));
        for (value, trusted) in [("1", true), ("true", false), ("", false)] {
            let Ok(Command::Run(c)) = run(&["--rules", "r"], &[("POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK", value)]) else {
                panic!("not a run")
            };
            assert_eq!(c.trust_client_clock, trusted, "{value:?}");
        }
    }

    #[test]
    fn errors_name_the_flag_and_value() {
        assert_eq!(
            run(&["--rules", "r", "--grpc", "nowhere"], &[]),
            Err("--grpc \"nowhere\" is not an address like 0.0.0.0:8081".into())
        );
        assert_eq!(run(&["--rules"], &[]), Err("--rules needs a value".into()));
        assert_eq!(run(&["--bogus"], &[]), Err("unknown argument \"--bogus\"".into()));
        assert_eq!(
            run(&[], &[]),
            Err("--rules FILE (or POLYLIMIT_RULES) is required".into())
        );
        assert_eq!(run(&["-h"], &[]), Ok(Command::Help));
    }
}
