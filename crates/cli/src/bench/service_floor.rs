//! The bound on a service request's latency: one round trip between two
//! threads over a Unix socket (64 bytes each way), measured on the machine
//! at hand. A request through the daemon costs at least this (client to
//! daemon and back) plus one hand-off inside the daemon, so at request
//! size S the overhead against in-process work at rate R is at least
//! floor / (floor + S / R).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// Median microseconds of a 64-byte ping-pong over a socket pair, over
/// `rounds` runs of `n` round trips.
pub fn socket_round_trip_us(n: usize, rounds: usize) -> Result<f64, String> {
    let mut runs = Vec::with_capacity(rounds);
    for _ in 0..rounds.max(1) {
        let (mut a, mut b) = UnixStream::pair().map_err(|e| format!("socket pair: {e}"))?;
        let echo = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while b.read_exact(&mut buf).is_ok() {
                if b.write_all(&buf).is_err() {
                    break;
                }
            }
        });
        let mut buf = [0u8; 64];
        let t = Instant::now();
        for _ in 0..n {
            a.write_all(&buf)
                .and_then(|()| a.read_exact(&mut buf))
                .map_err(|e| format!("ping-pong: {e}"))?;
        }
        runs.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        drop(a);
        let _ = echo.join();
    }
    runs.sort_by(f64::total_cmp);
    Ok(runs[runs.len() / 2])
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_round_trip_takes_some_time() {
        let us = super::socket_round_trip_us(200, 3).unwrap();
        assert!(us > 0.0 && us < 100_000.0, "{us}");
    }
}
