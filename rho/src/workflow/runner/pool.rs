//! The threads that run node attempts for one owner, reused from one attempt to the next:
//! creating, faulting in and tearing down a thread per node was a measurable part of a
//! trivial node's cost.
//!
//! Invariant: a job never waits behind another job. It goes to a thread that is idle (one
//! that finished its job and is waiting for the next) or, when none is, to a new thread;
//! so a long attempt (an agent, a node waiting for checkout access) delays no other, exactly
//! as with a thread per attempt.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Reusable worker threads; idle ones end when the pool is dropped, busy ones after their
/// job.
pub(super) struct WorkerPool {
    jobs: Sender<Job>,
    receiver: Arc<Mutex<Receiver<Job>>>,
    /// Threads that will take a job from the channel without it being promised to them.
    idle: Arc<AtomicUsize>,
    /// Threads started so far (for the tests).
    started: usize,
}

impl WorkerPool {
    pub(super) fn new() -> Self {
        let (jobs, receiver) = channel();
        Self {
            jobs,
            receiver: Arc::new(Mutex::new(receiver)),
            idle: Arc::new(AtomicUsize::new(0)),
            started: 0,
        }
    }

    /// Runs `job` on an idle thread, or on a new one when none is idle.
    pub(super) fn run(&mut self, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        // Claiming an idle thread first means every job sent has a thread that counted
        // itself idle and has yet to receive: the job is taken at once.
        let claimed = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        let job = if claimed {
            match self.jobs.send(job) {
                Ok(()) => return,
                // Unreachable while the pool holds the receiver; run it on a new thread.
                Err(returned) => returned.0,
            }
        } else {
            job
        };
        self.started += 1;
        let receiver = Arc::clone(&self.receiver);
        let idle = Arc::clone(&self.idle);
        std::thread::spawn(move || {
            job();
            loop {
                idle.fetch_add(1, Ordering::AcqRel);
                let next = receiver
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .recv();
                match next {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            }
        });
    }

    /// Threads started so far.
    #[cfg(test)]
    pub(super) fn threads_started(&self) -> usize {
        self.started
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;
    use std::time::Duration;

    use super::*;

    #[test]
    fn sequential_jobs_reuse_one_thread() {
        let mut pool = WorkerPool::new();
        let (done_tx, done_rx) = channel();
        for i in 0..50 {
            let done = done_tx.clone();
            pool.run(move || {
                done.send((i, std::thread::current().id())).unwrap();
            });
            let (got, _) = done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(got, i);
            // Let the thread count itself idle before the next job arrives.
            while pool.idle.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(pool.threads_started(), 1);
    }

    #[test]
    fn a_job_never_waits_behind_a_blocked_one() {
        let mut pool = WorkerPool::new();
        let (release_tx, release_rx) = sync_channel::<()>(0);
        let (done_tx, done_rx) = channel();
        // The first job blocks until released; the second must still run.
        pool.run(move || {
            release_rx.recv().unwrap();
        });
        let done = done_tx.clone();
        pool.run(move || done.send("second").unwrap());
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            "second"
        );
        assert_eq!(pool.threads_started(), 2);
        release_tx.send(()).unwrap();
    }
}
