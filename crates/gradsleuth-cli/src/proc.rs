//! Ending a whole process tree: the script, its launcher's workers (torchrun starts them in
//! their own sessions, so a process group would miss them), their DataLoader workers. The tree
//! is read from `/proc` before anything is signalled, so processes re-parented to init once
//! their parent dies are still found.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// `pid -> parent pid` of every process, from `/proc/<pid>/stat`.
fn parents() -> HashMap<u32, u32> {
    let mut out = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
        if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) {
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
                out.insert(pid, ppid);
            }
        }
    }
    out
}

/// `root` and every process below it.
pub fn tree(root: u32) -> BTreeSet<u32> {
    let parents = parents();
    let mut out = BTreeSet::from([root]);
    loop {
        let before = out.len();
        for (pid, ppid) in &parents {
            if out.contains(ppid) {
                out.insert(*pid);
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

fn alive(pid: u32) -> bool {
    // A zombie counts as gone: it only waits to be reaped.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we read from /proc; no memory is shared.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// SIGTERM from the top down, then SIGKILL to what is left after `grace`. The root first: a
/// launcher forwards the signal to its workers, and a script saves its capture while the
/// processes it started still run (ended first, a DataLoader worker makes the script raise
/// "worker killed" where it would have saved). The rest of the tree once the root has ended,
/// or after half the grace.
pub fn kill_tree(root: u32, grace: Duration) {
    let mut pids = tree(root);
    signal(root, libc::SIGTERM);
    let start = Instant::now();
    let mut rest_signalled = false;
    while start.elapsed() < grace {
        // Late children (a worker forking as it dies) join the set.
        pids.extend(tree(root));
        if !rest_signalled && (!alive(root) || start.elapsed() >= grace / 2) {
            rest_signalled = true;
            for &p in &pids {
                if p != root && alive(p) {
                    signal(p, libc::SIGTERM);
                }
            }
        }
        if pids.iter().all(|&p| !alive(p)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for &p in &pids {
        if alive(p) {
            signal(p, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_a_tree_whose_children_left_the_session() {
        // sh starts a child in a new session (as torchrun does) and both sleep.
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("setsid sleep 300 & sleep 300")
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let pids = tree(child.id());
        assert!(pids.len() >= 2, "{pids:?}");
        kill_tree(child.id(), Duration::from_secs(2));
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(100));
        assert!(pids.iter().all(|&p| !alive(p)), "left alive: {pids:?}");
    }
}
