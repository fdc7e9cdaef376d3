//! Wire order for `tools/call`: calls reach the engine in the order the client sent them.
//!
//! rmcp serves every request in its own task, so two calls sent back to back can reach
//! `call_tool` in either order. The order is fixed where it is known, when the transport reads
//! the frame: each `tools/call` gets a [`Place`] (its number in wire order), carried to its
//! handler inside the request itself (rmcp's request extensions, which it hands to the handler
//! as `RequestContext::extensions`). The handler waits for its place's [`Place::turn`] (every
//! earlier place released) before it submits its cell, then releases its own.
//!
//! Invariant, by construction: a place is released when the call submits its cell or when the
//! request is dropped, whatever happened to it (rmcp refused it, the handler returned early, the
//! client cancelled it, the session ended), because the last clone of a place releases it as it
//! goes. So one call can never hold up the rest, and nothing matches calls by id.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// The places given out and not yet released, for one connection. Cheap to clone.
#[derive(Clone)]
pub struct CallOrder {
    inner: Arc<Book>,
}

struct Book {
    /// Numbers of the places not yet released, and the next number to give.
    waiting: Mutex<(BTreeSet<u64>, u64)>,
    /// Bumped whenever a place is released.
    released: watch::Sender<u64>,
}

impl Default for CallOrder {
    fn default() -> Self {
        CallOrder {
            inner: Arc::new(Book {
                waiting: Mutex::new((BTreeSet::new(), 0)),
                released: watch::Sender::new(0),
            }),
        }
    }
}

impl CallOrder {
    /// The next place in wire order (the transport calls this as it reads each `tools/call`).
    pub fn next_place(&self) -> Place {
        let number = match self.inner.waiting.lock() {
            Ok(mut book) => {
                let number = book.1;
                book.1 += 1;
                book.0.insert(number);
                number
            }
            Err(_) => u64::MAX,
        };
        Place {
            held: Arc::new(Held {
                book: Arc::clone(&self.inner),
                number,
                released: AtomicBool::new(false),
            }),
        }
    }

    /// Gives `message` its place when it is a `tools/call` (anything else is left as is).
    pub fn book(&self, message: &mut rmcp::model::ClientJsonRpcMessage) {
        if let rmcp::model::JsonRpcMessage::Request(request) = message
            && let rmcp::model::ClientRequest::CallToolRequest(call) = &mut request.request
        {
            call.extensions.insert(self.next_place());
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> Vec<u64> {
        self.inner
            .waiting
            .lock()
            .unwrap()
            .0
            .iter()
            .copied()
            .collect()
    }
}

/// One `tools/call`'s place in wire order. Clones share it; it is released by [`Place::done`]
/// or when the last clone is dropped.
#[derive(Clone)]
pub struct Place {
    held: Arc<Held>,
}

struct Held {
    book: Arc<Book>,
    number: u64,
    released: AtomicBool,
}

impl Held {
    fn release(&self) {
        if self.released.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(mut book) = self.book.waiting.lock() {
            book.0.remove(&self.number);
        }
        self.book.released.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
    }
}

impl Place {
    /// Takes the place the transport gave a request out of its extensions (none for a request
    /// the transport did not read, such as a test calling the handler directly: it goes at
    /// once).
    pub fn take(extensions: &mut rmcp::model::Extensions) -> Option<Place> {
        extensions.remove::<Place>()
    }

    /// Waits until every place given before this one has been released.
    pub async fn turn(&self) {
        let mut released = self.held.book.released.subscribe();
        loop {
            let first = match self.held.book.waiting.lock() {
                Ok(book) => book
                    .0
                    .first()
                    .is_none_or(|first| *first >= self.held.number),
                Err(_) => true,
            };
            if first || released.changed().await.is_err() {
                return;
            }
        }
    }

    /// Lets the next call go (this call's cell is in the engine's queue now).
    pub fn done(&self) {
        self.held.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_later_call_waits_for_every_earlier_one() {
        let order = CallOrder::default();
        let places: Vec<Place> = (0..3).map(|_| order.next_place()).collect();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Handlers start in the worst order: last first.
        let mut tasks = Vec::new();
        for (n, place) in places.into_iter().enumerate().rev() {
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                place.turn().await;
                tx.send(n).unwrap();
                place.done();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let mut seen = Vec::new();
        while let Ok(n) = rx.try_recv() {
            seen.push(n);
        }
        assert_eq!(seen, vec![0, 1, 2]);
        assert!(order.waiting().is_empty());
    }

    #[tokio::test]
    async fn a_dropped_request_releases_its_place_and_frees_the_rest() {
        let order = CallOrder::default();
        let first = order.next_place();
        let second = order.next_place();
        let third = order.next_place();
        // The second call's request is dropped while it waits (rmcp refused it, or the client
        // cancelled it): its future and every clone of its place go with it.
        let waiting = {
            let second = second.clone();
            tokio::spawn(async move { second.turn().await })
        };
        drop(second);
        tokio::task::yield_now().await;
        waiting.abort();
        assert!(waiting.await.is_err());
        assert_eq!(order.waiting(), vec![0, 2]);
        drop(first);
        third.turn().await;
        third.done();
        assert!(order.waiting().is_empty());
    }

    #[tokio::test]
    async fn done_releases_even_while_clones_live() {
        let order = CallOrder::default();
        let first = order.next_place();
        let kept = first.clone();
        let second = order.next_place();
        first.turn().await;
        first.done();
        second.turn().await;
        drop(kept);
        assert_eq!(order.waiting(), vec![1]);
    }

    #[tokio::test]
    async fn a_place_travels_inside_the_request_to_its_handler() {
        let order = CallOrder::default();
        let line = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute","arguments":{"code":"1"}}}"#;
        let mut message: rmcp::model::ClientJsonRpcMessage = serde_json::from_str(line).unwrap();
        order.book(&mut message);
        let rmcp::model::JsonRpcMessage::Request(request) = &message else {
            panic!("a request");
        };
        let rmcp::model::ClientRequest::CallToolRequest(call) = &request.request else {
            panic!("a tool call");
        };
        assert!(call.extensions.get::<Place>().is_some());
        assert_eq!(order.waiting(), vec![0]);
        drop(message);
        assert!(order.waiting().is_empty());
    }

    #[tokio::test]
    async fn only_a_tool_call_is_booked() {
        let order = CallOrder::default();
        let line = r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#;
        let mut message: rmcp::model::ClientJsonRpcMessage = serde_json::from_str(line).unwrap();
        order.book(&mut message);
        assert!(order.waiting().is_empty());
    }
}
