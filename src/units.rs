//! Durations and sizes as people type and read them: `300ms`, `2s`, `10m`, `1h`,
//! `90d`; `383 bytes`, `12.5 MiB`.

use std::time::Duration;

/// Reads a duration with a unit: `300ms`, `2s`, `10m`, `1h`, `90d` (a day is 24 h).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 300ms, 2s, 10m or 1h"))?;
    let millis = match unit.trim() {
        "ms" => Some(value),
        "s" => value.checked_mul(1000),
        "m" | "min" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        "d" => value.checked_mul(86_400_000),
        "" => return Err(format!("{text:?} needs a unit: ms, s, m, h or d")),
        other => {
            return Err(format!(
                "{other:?} is not a unit of time: use ms, s, m, h or d"
            ));
        }
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// A duration as `parse_duration` reads it back: in the largest of its units that
/// holds it whole (`0s`, `300ms`, `2s`, `10m`, `1h`, `90d`), below a millisecond
/// as milliseconds with a fraction.
pub fn duration_text(duration: Duration) -> String {
    let millis = duration.as_millis();
    if duration.is_zero() {
        return "0s".to_owned();
    }
    if Duration::from_millis(millis as u64) != duration {
        return format!("{:.3}ms", duration.as_secs_f64() * 1000.0);
    }
    const UNITS: [(u128, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    UNITS
        .iter()
        .find(|(size, _)| millis.is_multiple_of(*size))
        .map_or_else(
            || format!("{millis}ms"),
            |(size, unit)| format!("{}{unit}", millis / size),
        )
}

/// A size in bytes, and beside it in the largest binary unit under which it is at
/// least one (`383 bytes`, `16384 bytes (16.0 KiB)`, `734003200 bytes (700.0 MiB)`).
pub fn bytes_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    match UNITS.iter().find(|(size, _)| bytes >= *size) {
        Some((size, unit)) => format!("{bytes} bytes ({:.1} {unit})", bytes as f64 / *size as f64),
        None => format!("{bytes} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_back_as_typed() {
        for text in ["0s", "300ms", "2s", "90s", "10m", "1h", "36h", "90d"] {
            let duration = parse_duration(text).expect(text);
            let expected = if text == "90s" { "90s" } else { text };
            assert_eq!(duration_text(duration), expected);
        }
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
        assert_eq!(duration_text(Duration::from_secs(120)), "2m");
        assert_eq!(duration_text(Duration::from_micros(250)), "0.250ms");
    }

    #[test]
    fn sizes_name_the_unit_that_fits() {
        assert_eq!(bytes_text(0), "0 bytes");
        assert_eq!(bytes_text(383), "383 bytes");
        assert_eq!(bytes_text(16384), "16384 bytes (16.0 KiB)");
        assert_eq!(bytes_text(734_003_200), "734003200 bytes (700.0 MiB)");
        assert_eq!(bytes_text(3 << 30), "3221225472 bytes (3.0 GiB)");
    }

    #[test]
    fn durations_need_a_unit_and_fit() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(
            parse_duration("400d"),
            Ok(Duration::from_secs(400 * 86_400))
        );
        assert!(parse_duration("5").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-5s").is_err());
    }
}
