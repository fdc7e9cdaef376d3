//! Wire order for `tools/call`: calls reach the engine in the order the client sent them.
//!
//! rmcp serves every request in its own task, so two calls sent back to back can reach
//! `call_tool` in either order. The frame guard sees the wire order: it books each `tools/call`
//! it passes on ([`CallOrder::arrived`]), and `call_tool` waits for its [`Turn`] (every earlier
//! call submitted, cancelled or answered) before it submits its cell. A `Turn` leaves the book
//! when it is dropped, whatever happened to the call, so one call can never hold up the rest.
//!
//! Invariant: only calls that rmcp is certain to hand to `call_tool` are booked (the guard
//! checks their params against rmcp's own type first), so every booked call is taken off again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rmcp::model::RequestId;
use tokio::sync::watch;

/// The book of `tools/call` requests in wire order. Cheap to clone.
#[derive(Clone)]
pub struct CallOrder {
    inner: Arc<Inner>,
}

struct Inner {
    /// Keys of the booked calls, oldest first.
    booked: Mutex<VecDeque<String>>,
    /// Bumped whenever a call leaves the book.
    changed: watch::Sender<u64>,
}

impl Default for CallOrder {
    fn default() -> Self {
        CallOrder {
            inner: Arc::new(Inner {
                booked: Mutex::new(VecDeque::new()),
                changed: watch::Sender::new(0),
            }),
        }
    }
}

/// The booking key of a request id: the JSON of rmcp's own parsed form, so the guard (which
/// sees raw JSON) and the handler (which sees `RequestId`) agree.
pub fn key_of(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

impl CallOrder {
    /// Books a call the guard is passing on (in wire order).
    pub fn arrived(&self, id: &RequestId) {
        if let Ok(mut booked) = self.inner.booked.lock() {
            booked.push_back(key_of(id));
        }
    }

    /// Waits until every call booked before `id` has left the book. A call that was never
    /// booked (a test calling the handler directly) goes at once. Dropping the future while it
    /// waits takes the call off the book too.
    pub async fn turn(&self, id: &RequestId) -> Turn {
        // Made first, so a wait that is abandoned still leaves the book.
        let turn = Turn {
            order: self.clone(),
            key: key_of(id),
        };
        let mut changed = self.inner.changed.subscribe();
        loop {
            let first = match self.inner.booked.lock() {
                Ok(booked) => booked.iter().position(|k| *k == turn.key).unwrap_or(0) == 0,
                Err(_) => true,
            };
            if first || changed.changed().await.is_err() {
                return turn;
            }
        }
    }

    fn leave(&self, key: &str) {
        if let Ok(mut booked) = self.inner.booked.lock()
            && let Some(at) = booked.iter().position(|k| k == key)
        {
            booked.remove(at);
        }
        self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    #[cfg(test)]
    fn booked(&self) -> Vec<String> {
        self.inner.booked.lock().unwrap().iter().cloned().collect()
    }
}

/// A call's place at the head of the book; dropping it lets the next call go.
pub struct Turn {
    order: CallOrder,
    key: String,
}

impl Turn {
    /// Lets the next call go (the cell is in the engine's queue now).
    pub fn done(self) {}
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.order.leave(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    #[tokio::test]
    async fn a_later_call_waits_for_every_earlier_one() {
        let order = CallOrder::default();
        for n in 1..=3 {
            order.arrived(&id(n));
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Handlers start in the worst order: last first.
        let mut tasks = Vec::new();
        for n in [3, 2, 1] {
            let order = order.clone();
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let turn = order.turn(&id(n)).await;
                tx.send(n).unwrap();
                turn.done();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let mut seen = Vec::new();
        while let Ok(n) = rx.try_recv() {
            seen.push(n);
        }
        assert_eq!(seen, vec![1, 2, 3]);
        assert!(order.booked().is_empty());
    }

    #[tokio::test]
    async fn a_call_dropped_while_waiting_leaves_the_book_and_frees_the_rest() {
        let order = CallOrder::default();
        order.arrived(&id(1));
        order.arrived(&id(2));
        order.arrived(&id(3));
        // Call 2 is cancelled while it waits: its future is dropped before its turn came.
        let waiting = {
            let order = order.clone();
            tokio::spawn(async move { order.turn(&id(2)).await })
        };
        tokio::task::yield_now().await;
        waiting.abort();
        assert!(waiting.await.is_err());
        assert_eq!(order.booked(), vec!["1".to_string(), "3".to_string()]);
        drop(order.turn(&id(1)).await);
        let third = order.turn(&id(3)).await;
        third.done();
        assert!(order.booked().is_empty());
    }

    #[tokio::test]
    async fn an_unbooked_call_goes_at_once() {
        let order = CallOrder::default();
        order.arrived(&id(1));
        let turn = order.turn(&RequestId::String("other".into())).await;
        turn.done();
        assert_eq!(order.booked(), vec!["1".to_string()]);
    }
}
