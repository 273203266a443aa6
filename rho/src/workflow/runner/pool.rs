//! The threads that run node attempts for one owner, reused from one attempt to the next:
//! creating, faulting in and tearing down a thread per node was a measurable part of a
//! trivial node's cost.
//!
//! Invariant: a job never waits behind another job. It goes to a thread that is idle (one
//! that finished its job and is waiting for the next) or, when none is, to a new thread;
//! so a long attempt (an agent, a node waiting for checkout access) delays no other, exactly
//! as with a thread per attempt. [`WorkerPool::wait_idle`] returns only once every job
//! handed to the pool has returned (a job may go on after it reported its result).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Reusable worker threads; idle ones end when the pool is dropped, busy ones after their
/// job.
pub(super) struct WorkerPool {
    jobs: Sender<Job>,
    receiver: Arc<Mutex<Receiver<Job>>>,
    /// Threads that will take a job from the channel without it being promised to them.
    idle: Arc<AtomicUsize>,
    /// Jobs handed over that have not returned yet.
    running: Arc<Running>,
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
            running: Arc::new(Running::default()),
            started: 0,
        }
    }

    /// Blocks until every job handed to the pool so far has returned.
    pub(super) fn wait_idle(&self) {
        let running = &*self.running;
        let mut waiting = running
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while running.count.load(Ordering::Acquire) > 0 {
            *waiting = true;
            waiting = running
                .returned
                .wait(waiting)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *waiting = false;
    }

    /// Runs `job` on an idle thread, or on a new one when none is idle.
    pub(super) fn run(&mut self, job: impl FnOnce() + Send + 'static) {
        self.running.count.fetch_add(1, Ordering::AcqRel);
        let running = Arc::clone(&self.running);
        let job: Job = Box::new(move || {
            // Counted down however the job ends (a panic included), so `wait_idle` returns.
            let _returned = Returned(running);
            job();
        });
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

/// The jobs that have not returned, and a waiter for them all.
#[derive(Default)]
struct Running {
    count: AtomicUsize,
    /// Whether `wait_idle` waits (so a job that returns wakes nobody otherwise: no system
    /// call per job).
    waiting: Mutex<bool>,
    returned: Condvar,
}

/// Counts a job as returned when dropped.
struct Returned(Arc<Running>);

impl Drop for Returned {
    fn drop(&mut self) {
        let running = &*self.0;
        if running.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Under the lock: a waiter either saw the count before this change and is
            // now waiting, or sees it after.
            let waiting = running
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *waiting {
                running.returned.notify_all();
            }
        }
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
    fn wait_idle_returns_once_every_job_returned_not_when_it_reported() {
        let mut pool = WorkerPool::new();
        let (reported_tx, reported_rx) = channel();
        let (release_tx, release_rx) = sync_channel::<()>(0);
        let finished = Arc::new(AtomicUsize::new(0));
        let done = Arc::clone(&finished);
        pool.run(move || {
            // Reports first, then goes on (like a worker writing status.json).
            reported_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        });
        reported_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            release_tx.send(()).unwrap();
        });
        pool.wait_idle();
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "wait_idle returned before the job's tail"
        );
        releaser.join().unwrap();
        // Nothing running: returns at once.
        pool.wait_idle();
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
