//! Durations as written in configuration: `500ms`, `15s`, `5m`, `24h`, `5d`.

use std::time::Duration;

/// Parses one duration; `None` if malformed.
pub fn parse(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(Duration::from_millis(n.checked_mul(ms)?))
}

/// Parses a comma-separated list, such as a retry schedule.
pub fn parse_list(s: &str) -> Option<Vec<Duration>> {
    s.split(',').map(parse).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("15s"), Some(Duration::from_secs(15)));
        assert_eq!(parse("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse("24h"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse("5d"), Some(Duration::from_secs(432_000)));
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "s", "5", "5x", "-5s", "5 s"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse_list("0s,5s,5m").map(|v| v.len()), Some(3));
        assert_eq!(parse_list("0s,,5m"), None);
    }
}
