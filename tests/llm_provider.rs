//! The host-side provider as the host serves a cell's model requests: `--llm-*` options, the
//! budget, the time limit and cancellation (`kernel_requests::Answerer`), against a fake
//! OpenAI-compatible or Anthropic endpoint on 127.0.0.1 (`common::fake_model`; no real endpoint
//! is reachable here). No kernel: the kernel's side of `llm_query` is tested in `llm_query.rs`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fake_model::{FakeApi, FakeModel, Reply};
use pi_repl::llm::kernel_requests::{Answer, Answerer, KernelRequest, MARKER};
use pi_repl::llm::ledger::{Ledger, Limits, Usage};
use pi_repl::llm::provider::{Api, ApiKey, Endpoint, HttpProvider};
use pi_repl::llm::{Brokers, ModelBroker, Prompt};
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk-fake-host-key-7f3a";
/// Only turns a hang into a failure; every wait ends on an event.
const LONG: Duration = Duration::from_secs(60);

fn answerer(fake: &FakeModel, api: Api, limits: Limits) -> Answerer {
    let provider = HttpProvider::new(Endpoint {
        api,
        base_url: Endpoint::parse_base_url(&fake.base_url).unwrap(),
        model: "fake-model".into(),
        key: Some(ApiKey::new(KEY.into())),
    })
    .unwrap();
    Answerer {
        brokers: Brokers::new(vec![Arc::new(provider) as Arc<dyn ModelBroker>]),
        ledger: Arc::new(Ledger::new(limits, None)),
    }
}

fn batch(prompts: &[&str], concurrency: usize) -> KernelRequest {
    KernelRequest {
        pi_repl: MARKER.into(),
        prompts: prompts
            .iter()
            .map(|text| Prompt {
                prompt: text.to_string(),
                system: None,
                max_tokens: None,
                model: None,
                schema: None,
            })
            .collect(),
        concurrency: Some(concurrency),
    }
}

fn texts(answers: &[Answer]) -> Vec<String> {
    answers
        .iter()
        .map(|a| match &a.text {
            Some(text) => text.clone(),
            None => format!(
                "{}: {}",
                a.error.clone().unwrap_or_default(),
                a.message.clone().unwrap_or_default()
            ),
        })
        .collect()
}

#[tokio::test]
async fn a_batch_is_answered_in_order_by_the_endpoint_and_its_usage_counted() {
    for (fake_api, api, auth) in [
        (FakeApi::OpenAi, Api::OpenAi, "authorization"),
        (FakeApi::Anthropic, Api::Anthropic, "x-api-key"),
    ] {
        let fake = FakeModel::echo(fake_api);
        let answerer = answerer(&fake, api, Limits::default());
        let cell = Arc::new(Mutex::new(Usage::default()));
        let answers = answerer
            .serve(
                batch(&["p0", "p1", "p2", "p3", "p4"], 2),
                Arc::clone(&cell),
                CancellationToken::new(),
            )
            .await;
        assert_eq!(
            texts(&answers),
            ["echo: p0", "echo: p1", "echo: p2", "echo: p3", "echo: p4"],
            "{fake_api:?}"
        );
        let seen = fake.requests();
        assert_eq!(seen.len(), 5);
        for request in &seen {
            assert_eq!(request.method, "POST");
            let sent = request.header(auth).unwrap_or_default();
            assert!(sent.ends_with(KEY), "{fake_api:?}: {auth}: {sent:?}");
        }
        assert!(fake.max_in_flight() <= 2, "{}", fake.max_in_flight());
        let usage = *cell.lock().unwrap();
        assert_eq!(usage.calls, 5);
        let input: u64 = answers.iter().map(|a| a.input_tokens.unwrap()).sum();
        let output: u64 = answers.iter().map(|a| a.output_tokens.unwrap()).sum();
        assert!(input > 0 && output > 0);
        assert_eq!((usage.input_tokens, usage.output_tokens), (input, output));
        assert_eq!(answerer.ledger.session(), usage);
    }
}

#[tokio::test]
async fn the_eleventh_request_of_a_cell_limited_to_ten_never_reaches_the_endpoint() {
    let fake = FakeModel::echo(FakeApi::OpenAi);
    let limits = Limits {
        calls_per_cell: 10,
        ..Limits::default()
    };
    let answerer = answerer(&fake, Api::OpenAi, limits);
    let prompts: Vec<String> = (0..11).map(|i| format!("p{i}")).collect();
    let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
    let answers = answerer
        .serve(
            batch(&prompts, 1),
            Arc::new(Mutex::new(Usage::default())),
            CancellationToken::new(),
        )
        .await;
    assert!(answers[..10].iter().all(|a| a.ok), "{:?}", texts(&answers));
    assert_eq!(answers[10].error.as_deref(), Some("LLMBudgetExceeded"));
    assert_eq!(fake.requests().len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_cell_closes_its_requests_at_the_endpoint() {
    let fake = FakeModel::echo(FakeApi::OpenAi);
    fake.hold();
    let answerer = answerer(&fake, Api::OpenAi, Limits::default());
    let cancel = CancellationToken::new();
    let serving = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            answerer
                .serve(
                    batch(&["a", "b"], 2),
                    Arc::new(Mutex::new(Usage::default())),
                    cancel,
                )
                .await
        }
    });
    // Both requests are at the endpoint, unanswered.
    tokio::task::block_in_place(|| fake.wait_for_requests(2, LONG));
    cancel.cancel();
    let answers = serving.await.unwrap();
    assert_eq!(
        answers
            .iter()
            .map(|a| a.error.as_deref())
            .collect::<Vec<_>>(),
        [Some("LLMCancelled"), Some("LLMCancelled")]
    );
    tokio::task::block_in_place(|| fake.wait_for_dropped(2, LONG));
}

#[tokio::test]
async fn an_endpoint_error_fails_its_own_prompt_only_and_never_shows_the_key() {
    let fake = FakeModel::start(FakeApi::OpenAi, |request| {
        if request.user_text() == "bad" {
            let echoed = request.header("authorization").unwrap_or_default();
            Reply::Status(429, format!("{{\"error\": \"rate limited for {echoed}\"}}"))
        } else {
            Reply::Text("fine".into())
        }
    });
    let answerer = answerer(&fake, Api::OpenAi, Limits::default());
    let answers = answerer
        .serve(
            batch(&["good", "bad", "good"], 3),
            Arc::new(Mutex::new(Usage::default())),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(texts(&answers)[0], "fine");
    assert_eq!(texts(&answers)[2], "fine");
    assert_eq!(answers[1].error.as_deref(), Some("LLMError"));
    let message = answers[1].message.clone().unwrap();
    assert!(message.contains("answered HTTP 429"), "{message}");
    assert!(
        message.contains("rate limited for Bearer [key]"),
        "{message}"
    );
    assert!(!message.contains(KEY), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_time_limit_is_an_llm_timeout_and_is_closed_at_the_endpoint() {
    let fake = FakeModel::echo(FakeApi::Anthropic);
    fake.hold();
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let answerer = answerer(&fake, Api::Anthropic, limits);
    let answers = answerer
        .serve(
            batch(&["slow"], 1),
            Arc::new(Mutex::new(Usage::default())),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(
        answers[0].error.as_deref(),
        Some("LLMTimeout"),
        "{:?}",
        texts(&answers)
    );
    tokio::task::block_in_place(|| fake.wait_for_dropped(1, LONG));
}
