//! Helpers shared by the bench binaries that compare rho with ninja.

/// CPU seconds (user + system) used so far by this process's waited-for children and
/// their descendants, from `/proc/self/stat` (in `USER_HZ`, 100 per second on Linux).
pub fn children_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; cutime and cstime are fields 16 and 17.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u32>().ok())
            .unwrap_or(0)
    };
    // `rest` starts at field 3 (state): field N is at index N - 3.
    (f64::from(ticks(13)) + f64::from(ticks(14))) / 100.0
}
