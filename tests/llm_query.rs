//! `llm_query` from a cell, answered by the MCP client through `sampling/createMessage`:
//! the real `pi-repl mcp` binary, a real kernel, and this test as the client.

mod common;

use std::time::Duration;

use common::TestHome;
use common::fake_model::{FakeApi, FakeModel};
use common::mcp_client::{McpClient, outcome, text};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(120);

fn server(home: &TestHome, sampling: bool) -> McpClient {
    let mut command = home.cli();
    command.arg("mcp");
    let mut client = McpClient::spawn(command);
    let capabilities = if sampling {
        json!({"sampling": {}})
    } else {
        json!({})
    };
    client.initialize_with(capabilities);
    client
}

/// The text a `createMessage` request asks about.
fn asked(request: &Value) -> String {
    request["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn answer(text: &str) -> Value {
    json!({"model": "fake-model", "role": "assistant",
           "content": {"type": "text", "text": text}})
}

fn call(client: &mut McpClient, code: &str) -> i64 {
    client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": code}}),
    )
}

#[test]
fn a_cell_gets_the_clients_answer_and_the_result_counts_the_request() {
    let home = TestHome::new();
    let mut client = server(&home, true);
    let id = call(
        &mut client,
        "reply = llm_query('Say hi.', system='Be terse.', max_tokens=50)\nreply",
    );
    let request = client.next_named("sampling/createMessage", LONG);
    assert_eq!(asked(&request), "Say hi.");
    assert_eq!(request["params"]["systemPrompt"], "Be terse.");
    assert_eq!(request["params"]["maxTokens"], 50);
    client.respond(&request, answer("hi"));
    let result = client.response(id, LONG)["result"].clone();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        text(&result).lines().next(),
        Some("'hi'"),
        "{}",
        text(&result)
    );
    assert_eq!(outcome(&result)["llm"]["calls"], 1);
    assert!(text(&result).contains("[llm_query: 1 request(s)"));
    // The answer stays in the workspace like any value.
    assert_eq!(
        text(&client.execute("reply.upper()")),
        "'HI'",
        "no request, no usage line"
    );
}

#[test]
fn a_schema_answer_is_parsed_and_a_wrong_one_raises_with_the_text() {
    let home = TestHome::new();
    let mut client = server(&home, true);
    let schema = "{'type': 'object', 'properties': {'n': {'type': 'integer'}}, 'required': ['n']}";
    let id = call(&mut client, &format!("llm_query('count', schema={schema})"));
    let request = client.next_named("sampling/createMessage", LONG);
    let system = request["params"]["systemPrompt"].as_str().unwrap();
    assert!(system.contains("JSON schema"), "{system}");
    client.respond(&request, answer("```json\n{\"n\": 3}\n```"));
    let parsed = text(&client.response(id, LONG)["result"]);
    assert_eq!(parsed.lines().next(), Some("{'n': 3}"), "{parsed}");

    let id = call(
        &mut client,
        &format!(
            "from pi_repl_kernel.model_requests import LLMSchemaError\ntry:\n    llm_query('count', schema={schema})\nexcept LLMSchemaError as e:\n    print(type(e).__name__, e.text)"
        ),
    );
    let request = client.next_named("sampling/createMessage", LONG);
    client.respond(&request, answer("{\"n\": \"three\"}"));
    let printed = text(&client.response(id, LONG)["result"]);
    assert_eq!(
        printed.lines().next(),
        Some("LLMSchemaError {\"n\": \"three\"}"),
        "{printed}"
    );
}

#[test]
fn a_batch_of_eight_with_concurrency_four_has_at_most_four_requests_out() {
    let home = TestHome::new();
    let mut client = server(&home, true);
    let id = call(
        &mut client,
        "answers = llm_query_batched([f'p{i}' for i in range(8)], concurrency=4)\nanswers",
    );
    let mut outstanding: Vec<Value> = (0..4)
        .map(|_| client.next_named("sampling/createMessage", LONG))
        .collect();
    // Everything the server wrote before its answer to this ping has been read by then: no
    // fifth request may be among it, since none of the four was answered.
    let ping = client.request("ping", json!({}));
    client.response(ping, LONG);
    assert!(
        !client
            .seen
            .iter()
            .any(|m| m["method"] == "sampling/createMessage"),
        "a fifth request went out while four were unanswered: {:?}",
        client.seen
    );
    let mut answered = 0;
    while answered < 8 {
        let request = outstanding.remove(0);
        client.respond(&request, answer(&format!("a-{}", asked(&request))));
        answered += 1;
        if answered <= 4 {
            outstanding.push(client.next_named("sampling/createMessage", LONG));
        }
        assert!(outstanding.len() <= 4);
    }
    let result = client.response(id, LONG)["result"].clone();
    let expected: Vec<String> = (0..8).map(|i| format!("'a-p{i}'")).collect();
    assert_eq!(
        text(&result).lines().next(),
        Some(format!("[{}]", expected.join(", ")).as_str()),
        "in order"
    );
    assert_eq!(outcome(&result)["llm"]["calls"], 8);
}

#[test]
fn a_failed_item_of_a_batch_is_data_and_the_others_are_kept() {
    let home = TestHome::new();
    let mut client = server(&home, true);
    let id = call(
        &mut client,
        "out = llm_query_batched(['good', 'bad'], concurrency=1)\n[type(x).__name__ for x in out]",
    );
    for _ in 0..2 {
        let request = client.next_named("sampling/createMessage", LONG);
        if asked(&request) == "bad" {
            client.send(&json!({"jsonrpc": "2.0", "id": request["id"],
                "error": {"code": -1, "message": "the user declined"}}));
        } else {
            client.respond(&request, answer("fine"));
        }
    }
    let result = client.response(id, LONG)["result"].clone();
    assert_eq!(text(&result).lines().next(), Some("['str', 'LLMError']"));
    let id = call(&mut client, "str(out[1])");
    assert!(
        text(&client.response(id, LONG)["result"]).contains("the user declined"),
        "the client's refusal reaches the cell"
    );
}

#[test]
fn without_sampling_or_an_endpoint_the_cell_is_told_what_to_configure() {
    let home = TestHome::new();
    let mut client = server(&home, false);
    let result = client.execute(
        "from pi_repl_kernel.model_requests import LLMUnavailable\ntry:\n    llm_query('hi')\nexcept LLMUnavailable as e:\n    print(e)",
    );
    let printed = text(&result);
    assert!(printed.contains("supports sampling"), "{printed}");
    assert!(printed.contains("--llm-base-url"), "{printed}");
    assert!(
        outcome(&result).get("llm").is_none(),
        "nothing was asked, nothing counted"
    );
}

#[test]
fn cancelling_the_call_cancels_the_model_request_and_the_next_query_works() {
    let home = TestHome::new();
    let mut client = server(&home, true);
    let id = call(&mut client, "llm_query('slow question')");
    let request = client.next_named("sampling/createMessage", LONG);
    client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "the user pressed Esc"}),
    );
    let cancelled = client.next_named("notifications/cancelled", LONG);
    assert_eq!(
        cancelled["params"]["requestId"], request["id"],
        "the server cancels its own request to the client"
    );
    // The late answer is discarded; the next query gets its own answer.
    client.respond(&request, answer("too late"));
    let id = call(&mut client, "llm_query('next')");
    let next = client.next_named("sampling/createMessage", LONG);
    assert_eq!(asked(&next), "next");
    client.respond(&next, answer("on time"));
    let result = text(&client.response(id, LONG)["result"]);
    // The cancelled call's cell is reported first (it ended while nobody was asking).
    assert!(
        result.starts_with("<cell_finished cell=1 status=aborted"),
        "{result}"
    );
    let after_notice = result
        .split("</cell_finished>\n")
        .nth(1)
        .unwrap_or_default();
    assert_eq!(after_notice.lines().next(), Some("'on time'"), "{result}");
}

#[test]
fn input_stays_refused_while_the_stdin_channel_serves_llm_query() {
    let home = TestHome::new();
    let mut client = server(&home, true);
    let result = client.execute("input('name? ')");
    assert_eq!(result["isError"], true);
    assert!(text(&result).contains("input() is not available in pi-repl"));
    let raw = client.execute("get_ipython().kernel.raw_input('x')");
    assert!(
        text(&raw).contains("input() is not available"),
        "{}",
        text(&raw)
    );
}

/// A server whose cells' `llm_query` goes to `fake` (the client declares no sampling).
fn server_with_endpoint(home: &TestHome, fake: &FakeModel, extra: &[&str]) -> McpClient {
    let mut command = home.cli();
    command
        .args([
            "mcp",
            "--llm-base-url",
            &fake.base_url,
            "--llm-model",
            "fake-model",
        ])
        .args(extra)
        .env("PI_REPL_LLM_API_KEY", ENDPOINT_KEY);
    let mut client = McpClient::spawn(command);
    client.initialize();
    client
}

const ENDPOINT_KEY: &str = "sk-endpoint-key-5c1e";

#[test]
fn a_configured_endpoint_answers_and_its_key_never_reaches_the_kernel() {
    let home = TestHome::new();
    let fake = FakeModel::echo(FakeApi::OpenAi);
    // Even with every credential passed, the endpoint's own key is withheld.
    let mut client = server_with_endpoint(&home, &fake, &["--pass-credentials"]);
    let result = client.execute(&format!(
        "import os\nenv = open('/proc/self/environ', 'rb').read().decode('latin-1')\n\
         print('{ENDPOINT_KEY}' in env, 'PI_REPL_LLM_API_KEY' in os.environ)\n\
         import pi_repl_kernel.model_requests as m\nprint('{ENDPOINT_KEY}' in repr(vars(m)))\n\
         llm_query('hello there')"
    ));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        text(&result).lines().take(3).collect::<Vec<_>>(),
        ["False False", "False", "'echo: hello there'"],
    );
    let seen = fake.wait_for_requests(1, LONG);
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {ENDPOINT_KEY}").as_str()),
        "the host sends the key to the endpoint it was configured for"
    );
    assert_eq!(seen[0].body["model"], "fake-model");
}

#[test]
fn a_cell_limited_to_ten_requests_gets_the_eleventh_refused_and_nothing_is_sent() {
    let home = TestHome::new();
    let fake = FakeModel::echo(FakeApi::OpenAi);
    let mut client = server_with_endpoint(&home, &fake, &["--llm-max-calls-per-cell", "10"]);
    let result = client.execute(
        "from pi_repl_kernel.model_requests import LLMBudgetExceeded\nanswers = []\nfor i in range(11):\n    \
         try:\n        answers.append(llm_query(f'q{i}'))\n    except LLMBudgetExceeded as e:\n        \
         print('refused', i, e)\nlen(answers)",
    );
    let printed = text(&result);
    assert!(
        printed.starts_with("refused 10 this cell has made 10 model requests"),
        "{printed}"
    );
    assert!(printed.contains("\n10\n"), "ten answered: {printed}");
    assert_eq!(
        fake.requests().len(),
        10,
        "the eleventh never left the host"
    );
    // The next cell has a budget of its own.
    assert_eq!(
        text(&client.execute("llm_query('again')")).lines().next(),
        Some("'echo: again'")
    );
}
