//! Counters read from a server's `INFO commandstats`: how many scripts it
//! has run, e.g. to count the lock operations (each one script call) a test
//! caused.

use std::io;
use std::time::Duration;

use crate::RedisServer;

/// The command whose reply the counters are read from.
const COMMANDSTATS: [&str; 2] = ["INFO", "commandstats"];

impl RedisServer {
    /// Script calls this server has run so far: the sum of the `calls=`
    /// counts of `EVALSHA`, `EVAL` and `FCALL` (a function of a library, as
    /// lock-runtime runs its scripts where the server has functions) in
    /// `INFO commandstats`.
    ///
    /// Subtract two readings to count the script calls made in between
    /// (the `INFO` command itself is no script call). Only these three
    /// commands count: the commands a script makes are counted under their
    /// own names, and `EVALSHA_RO`, `EVAL_RO` and `FCALL_RO` are not counted.
    /// The counts start again from 0 when the server restarts (or after
    /// `CONFIG RESETSTAT`). A reply without those lines, such as an error
    /// reply, counts 0.
    ///
    /// # Panics
    ///
    /// Like [`RedisServer::cli`]: on I/O errors, including no reply within
    /// 5 s. Use [`RedisServer::try_script_calls`] to handle those.
    pub fn script_calls(&self) -> u64 {
        count_script_calls(&self.cli(&COMMANDSTATS))
    }

    /// Like [`RedisServer::script_calls`], but with the given
    /// connect/read/write timeout, and returning I/O errors (e.g. the server
    /// is paused or killed) instead of panicking.
    pub fn try_script_calls(&self, timeout: Duration) -> io::Result<u64> {
        self.try_cli(&COMMANDSTATS, timeout)
            .map(|stats| count_script_calls(&stats))
    }
}

/// The sum of the `calls=` counts of the `cmdstat_evalsha`,
/// `cmdstat_eval` and `cmdstat_fcall` lines of an `INFO commandstats` reply; lines whose count
/// does not parse are skipped.
fn count_script_calls(commandstats: &str) -> u64 {
    commandstats
        .lines()
        .filter(|line| {
            ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_fcall:"]
                .iter()
                .any(|name| line.starts_with(name))
        })
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_evalsha_eval_and_fcall_calls_only() {
        let stats = "# Commandstats\r\n\
                     cmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n\
                     cmdstat_eval:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n\
                     cmdstat_evalsha_ro:calls=100,usec=5,usec_per_call=0.05\r\n\
                     cmdstat_eval_ro:calls=100,usec=5,usec_per_call=0.05\r\n\
                     cmdstat_fcall:calls=4,usec=40,usec_per_call=10.00\r\n\
                     cmdstat_fcall_ro:calls=100,usec=5,usec_per_call=0.05\r\n\
                     cmdstat_hget:calls=7,usec=7,usec_per_call=1.00\r\n\
                     cmdstat_info:calls=2,usec=20,usec_per_call=10.00\r\n";
        assert_eq!(count_script_calls(stats), 17);
        assert_eq!(count_script_calls("# Commandstats\r\n"), 0);
        assert_eq!(
            count_script_calls("LOADING Redis is loading the dataset in memory"),
            0
        );
        assert_eq!(count_script_calls("cmdstat_eval:calls=x,usec=1\r\n"), 0);
    }

    #[test]
    fn counts_the_scripts_a_server_runs() {
        let server = RedisServer::start();
        assert_eq!(server.script_calls(), 0);
        assert_eq!(server.cli(&["EVAL", "return 1", "0"]), "1");
        let sha = server.cli(&["SCRIPT", "LOAD", "return redis.call('PING')"]);
        assert_eq!(server.cli(&["EVALSHA", &sha, "0"]), "PONG");
        assert_eq!(server.cli(&["EVALSHA", &sha, "0"]), "PONG");
        assert_eq!(server.script_calls(), 3);
        let library = "#!lua name=counted\nredis.register_function('one', function() return 1 end)";
        assert_eq!(server.cli(&["FUNCTION", "LOAD", library]), "counted");
        assert_eq!(server.cli(&["FCALL", "one", "0"]), "1");
        assert_eq!(server.script_calls(), 4);
        assert_eq!(server.try_script_calls(Duration::from_secs(1)).unwrap(), 4);

        server.pause();
        assert!(server.try_script_calls(Duration::from_millis(200)).is_err());
        server.resume();
    }
}
