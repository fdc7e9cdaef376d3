//! What a call answers when it has no outcome to render: its cell is still queued or running
//! when the call's wait ends (what it printed since, and the calls that look again, stop it or
//! go on), or the call asked about a cell there is nothing left to say about.

use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use super::cell_book::Pending;
use crate::view::render::meta_of;

/// The result of a call whose wait ended before its cell did.
pub(super) fn pending_result(pending: &Pending, default_wait: Option<Duration>) -> CallToolResult {
    let cell = pending.cell;
    let mut text = Vec::new();
    let elapsed = super::seconds_text(pending.elapsed);
    if let Some(reset) = &pending.reset {
        text.push(reset.notice());
    }
    if pending.queued {
        let behind = match pending.blocked_by {
            Some(blocker) => format!("behind cell {blocker}, which is still running"),
            None => "behind earlier cells".to_string(),
        };
        text.push(format!(
            "[cell {cell} is queued {behind}; it runs when that ends (waiting {elapsed} so far)]"
        ));
    } else {
        text.push(format!(
            "[cell {cell} is still running ({elapsed} so far) and goes on in the background]"
        ));
    }
    if !pending.new_stdout.is_empty() {
        text.push(pending.new_stdout.trim_end_matches('\n').to_string());
    }
    if !pending.new_stderr.is_empty() {
        text.push(format!(
            "[stderr]\n{}",
            pending.new_stderr.trim_end_matches('\n')
        ));
    }
    if pending.rich_so_far > 0 {
        text.push(format!(
            "[{} rich output(s) so far; they come with its outcome]",
            pending.rich_so_far
        ));
    }
    let waits = match default_wait {
        Some(wait) => format!("waits up to {}", super::seconds_text(wait)),
        None => "waits".to_string(),
    };
    let stop = match (pending.queued, pending.blocked_by) {
        (true, Some(blocker)) => format!(
            "{{\"cell\": {cell}, \"interrupt\": true}} cancels it; {{\"cell\": {blocker}, \
             \"interrupt\": true}} stops the cell in front"
        ),
        _ => format!("{{\"cell\": {cell}, \"interrupt\": true}} stops it"),
    };
    text.push(format!(
        "[next: execute {{\"cell\": {cell}}} {waits} and returns what it prints next, then \
         its outcome; {stop}; new code runs after it]"
    ));
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.join("\n"))]);
    let mut outcome = json!({
        "status": if pending.queued { "queued" } else { "running" },
        "cell": cell,
        "elapsed_ms": pending.elapsed.as_millis() as u64,
        "blocked_by": pending.blocked_by,
    });
    if let Some(reset) = &pending.reset {
        outcome["reset"] = json!(reset);
    }
    result.meta = Some(meta_of(outcome));
    result
}

/// Puts `lines` before the text of `result` (a reset notice stays first within its own text).
pub(super) fn prepend_text(result: &mut CallToolResult, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let heading = lines.join("\n");
    match result.content.first_mut() {
        Some(ContentBlock::Text(first)) => first.text = format!("{heading}\n{}", first.text),
        _ => result.content.insert(0, ContentBlock::text(heading)),
    }
}

/// The error for `{"cell": N}` about a cell with nothing left to say (no record of it either):
/// it never existed, or its outcome went with its own call. `last`: the session's last cell.
pub(super) fn unknown_cell_text(cell: u64, last: u64) -> CallToolResult {
    let known = match last {
        0 => "no cell has run yet".to_string(),
        1 => "cells so far: 1".to_string(),
        _ => format!("cells so far: 1 to {last}"),
    };
    let what = if cell <= last {
        format!(
            "cell {cell} has nothing left to look at: its outcome was returned by its own \
             call, or long ago, and is not kept ({known})"
        )
    } else {
        format!("there is no cell {cell} in this session ({known})")
    };
    CallToolResult::error(vec![ContentBlock::text(format!(
        "error: {what}; {{\"cell\": N}} takes the number of a cell whose call answered \
         `running` or `queued`"
    ))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(result: &CallToolResult) -> String {
        match result.content.first() {
            Some(ContentBlock::Text(block)) => block.text.clone(),
            other => panic!("not text: {other:?}"),
        }
    }

    fn pending(queued: bool, blocked_by: Option<u64>) -> Pending {
        Pending {
            cell: 7,
            queued,
            blocked_by,
            elapsed: Duration::from_millis(2500),
            new_stdout: "step 1\n".into(),
            new_stderr: String::new(),
            rich_so_far: 2,
            reset: None,
        }
    }

    #[test]
    fn a_running_cell_says_what_it_printed_and_how_to_look_again_or_stop_it() {
        let result = pending_result(&pending(false, None), Some(Duration::from_secs(30)));
        let text = text(&result);
        assert!(
            text.starts_with("[cell 7 is still running (2.5 s so far)"),
            "{text}"
        );
        assert!(text.contains("\nstep 1\n"), "{text}");
        assert!(text.contains("[2 rich output(s) so far"), "{text}");
        assert!(
            text.contains("execute {\"cell\": 7} waits up to 30 s"),
            "{text}"
        );
        assert!(
            text.contains("{\"cell\": 7, \"interrupt\": true} stops it"),
            "{text}"
        );
        let meta = serde_json::to_value(result.meta).unwrap();
        let outcome = &meta[crate::view::render::META_KEY];
        assert_eq!(outcome["status"], "running");
        assert_eq!(outcome["elapsed_ms"], 2500);
        assert_eq!(result.is_error, Some(false));
    }

    #[test]
    fn a_queued_cell_names_the_one_in_front_and_how_to_stop_either() {
        let text = text(&pending_result(&pending(true, Some(5)), None));
        assert!(text.starts_with("[cell 7 is queued behind cell 5, which is still running"));
        assert!(
            text.contains("execute {\"cell\": 7} waits and returns"),
            "{text}"
        );
        assert!(
            text.contains("{\"cell\": 5, \"interrupt\": true} stops the cell in front"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_cell_is_an_error_that_says_which_cells_exist() {
        let never = unknown_cell_text(9, 3);
        assert_eq!(never.is_error, Some(true));
        assert!(text(&never).contains("there is no cell 9 in this session (cells so far: 1 to 3)"));
        let gone = text(&unknown_cell_text(2, 3));
        assert!(
            gone.contains("cell 2 has nothing left to look at"),
            "{gone}"
        );
        assert!(text(&unknown_cell_text(1, 0)).contains("no cell has run yet"));
    }

    #[test]
    fn lines_go_before_the_text_or_first_when_there_is_none() {
        let mut result = CallToolResult::success(vec![ContentBlock::text("body")]);
        prepend_text(&mut result, &["a".into(), "b".into()]);
        assert_eq!(text(&result), "a\nb\nbody");
        let mut empty = CallToolResult::success(vec![]);
        prepend_text(&mut empty, &["only".into()]);
        assert_eq!(text(&empty), "only");
    }
}
