// A cell's model call answered by pi's model: the MCP request as a pi-ai completion, the answer
// as an MCP result, the model a hint may pick, and every way pi cannot answer. pi's model registry
// and pi-ai's completion are stand-ins here (recording what they were given); the real ones are
// exercised through the real `pi` in e2e/llm-query.test.ts.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Api, AssistantMessage, Context, Model, SimpleStreamOptions } from "@mariozechner/pi-ai";
import { ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { ModelCalls } from "../../src/model-calls.js";
import {
	answerSampling,
	chooseModel,
	lastUserText,
	type PiModels,
	PROMPT_PREVIEW_CHARS,
	SamplingError,
	type SamplingParams,
	toResult,
	USAGE_META,
} from "../../src/sampling.js";

function model(provider: string, id: string, over: Partial<Model<Api>> = {}): Model<Api> {
	return {
		id,
		name: id,
		api: "fake-api",
		provider,
		baseUrl: "http://127.0.0.1:9",
		reasoning: false,
		input: ["text"],
		cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
		contextWindow: 100_000,
		maxTokens: 1_000,
		...over,
	} as Model<Api>;
}

const CURRENT = model("anthropic", "claude-x", { input: ["text", "image"] });
const OTHER = model("openai", "gpt-y");

function answer(text: string, over: Partial<AssistantMessage> = {}): AssistantMessage {
	return {
		role: "assistant",
		content: [
			{ type: "thinking", thinking: "hmm" },
			{ type: "text", text },
		],
		api: "fake-api",
		provider: "anthropic",
		model: "claude-x",
		usage: { input: 12, output: 3, cacheRead: 0, cacheWrite: 0, totalTokens: 15, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
		stopReason: "stop",
		timestamp: 0,
		...over,
	};
}

interface Sent {
	model: Model<Api>;
	context: Context;
	options: SimpleStreamOptions;
}

/** pi's side, recording each completion it was asked for. */
function pi(over: Partial<PiModels> = {}, reply: (sent: Sent) => Promise<AssistantMessage> = async () => answer("Paris")) {
	const sent: Sent[] = [];
	const models: PiModels = {
		current: () => CURRENT,
		available: () => [CURRENT, OTHER],
		auth: async () => ({ ok: true, apiKey: "sk-pi", headers: { "x-pi": "1" } }),
		complete: (m, context, options) => {
			const one = { model: m, context, options };
			sent.push(one);
			return reply(one);
		},
		...over,
	};
	return { models, sent };
}

function params(over: Partial<SamplingParams> = {}): SamplingParams {
	return { messages: [{ role: "user", content: { type: "text", text: "Capital of France?" } }], maxTokens: 50, ...over };
}

async function rejected(promise: Promise<unknown>): Promise<SamplingError> {
	try {
		await promise;
	} catch (error) {
		assert.ok(error instanceof SamplingError, String(error));
		return error;
	}
	assert.fail("expected a SamplingError");
}

describe("sampling answered by pi's model", () => {
	it("sends one completion to the current model with pi's credentials and answers with its text, model, stop reason and usage", async () => {
		const { models, sent } = pi();
		const signal = new AbortController().signal;
		const result = await answerSampling(params({ systemPrompt: "Be brief.", temperature: 0.2 }), models, signal);
		assert.equal(sent.length, 1);
		const [one] = sent;
		assert.equal(one?.model, CURRENT);
		assert.equal(one?.context.systemPrompt, "Be brief.");
		assert.deepEqual(
			one?.context.messages.map((m) => [m.role, m.content]),
			[["user", [{ type: "text", text: "Capital of France?" }]]],
		);
		assert.equal(one?.context.tools, undefined, "no tools: a plain completion");
		assert.equal(one?.options.apiKey, "sk-pi");
		assert.deepEqual(one?.options.headers, { "x-pi": "1" });
		assert.equal(one?.options.maxTokens, 50);
		assert.equal(one?.options.temperature, 0.2);
		assert.equal(one?.options.signal, signal, "the request's signal aborts the model request");
		assert.deepEqual(result, {
			model: "anthropic/claude-x",
			role: "assistant",
			content: { type: "text", text: "Paris" },
			stopReason: "endTurn",
			_meta: { [USAGE_META]: { input_tokens: 12, output_tokens: 3 } },
		});
	});

	it("asks no more tokens than the model gives, and says when the answer was cut", async () => {
		const { models, sent } = pi({}, async () => answer("Par", { stopReason: "length" }));
		const result = await answerSampling(params({ maxTokens: 50_000 }), models, new AbortController().signal);
		assert.equal(sent[0]?.options.maxTokens, 1_000);
		assert.equal(result.stopReason, "maxTokens");
	});

	it("keeps a conversation's turns and images in order", async () => {
		const { models, sent } = pi();
		await answerSampling(
			params({
				messages: [
					{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image", data: "AAAA", mimeType: "image/png" }] },
					{ role: "assistant", content: { type: "text", text: "A red square." } },
					{ role: "user", content: { type: "text", text: "And its size?" } },
				],
			}),
			models,
			new AbortController().signal,
		);
		const messages = sent[0]?.context.messages ?? [];
		assert.deepEqual(
			messages.map((m) => m.role),
			["user", "assistant", "user"],
		);
		assert.deepEqual(messages[0]?.content, [
			{ type: "text", text: "What is this?" },
			{ type: "image", data: "AAAA", mimeType: "image/png" },
		]);
		const assistant = messages[1];
		assert.ok(assistant?.role === "assistant");
		assert.deepEqual(assistant.content, [{ type: "text", text: "A red square." }]);
		assert.equal(assistant.model, "claude-x");
	});

	it("honours a model hint only when it names a model pi can use", () => {
		const { models } = pi();
		const hinted = (...names: string[]) => chooseModel(params({ modelPreferences: { hints: names.map((name) => ({ name })) } }), models);
		assert.equal(hinted("gpt-y"), OTHER, "by id");
		assert.equal(hinted("openai/gpt-y"), OTHER, "by provider/id");
		assert.equal(hinted("gemini-z"), CURRENT, "a model pi does not have: the current one");
		assert.equal(hinted("gemini-z", "gpt-y"), OTHER, "the first hint pi has");
		assert.equal(chooseModel(params(), models), CURRENT, "no hint: the current one");
		const { models: keyless } = pi({ available: () => [CURRENT] });
		assert.equal(chooseModel(params({ modelPreferences: { hints: [{ name: "gpt-y" }] } }), keyless), CURRENT, "no credentials for it: not picked");
	});

	it("tells the cell to select a model when pi has none", async () => {
		const { models, sent } = pi({ current: () => undefined });
		const error = await rejected(answerSampling(params(), models, new AbortController().signal));
		assert.match(error.message, /pi has no model selected: choose one with \/model/);
		assert.equal(error.code, ErrorCode.InternalError);
		assert.equal(sent.length, 0);
	});

	it("names the provider and the fix when pi has no credentials for the model", async () => {
		const { models, sent } = pi({ auth: async () => ({ ok: false, error: 'No API key found for "anthropic"' }) });
		const error = await rejected(answerSampling(params(), models, new AbortController().signal));
		assert.match(error.message, /pi has no usable credentials for the model anthropic\/claude-x: No API key found for "anthropic"/);
		assert.match(error.message, /\/login/);
		assert.equal(sent.length, 0);
	});

	it("passes on the provider's error, with a hint when pi found no key", async () => {
		const failing = async () => answer("", { stopReason: "error", errorMessage: "401 invalid x-api-key" });
		const keyed = await rejected(answerSampling(params(), pi({}, failing).models, new AbortController().signal));
		assert.equal(keyed.message, "the model anthropic/claude-x failed: 401 invalid x-api-key");
		const keyless = pi({ auth: async () => ({ ok: true }) }, failing);
		const unkeyed = await rejected(answerSampling(params(), keyless.models, new AbortController().signal));
		assert.match(unkeyed.message, /401 invalid x-api-key \(pi found no API key for this provider/);
		assert.equal(keyless.sent[0]?.options.apiKey, undefined, "no key: the provider's own lookup (environment, cloud credentials)");
		const thrown = await rejected(
			answerSampling(
				params(),
				pi({}, async () => {
					throw new Error("No API provider registered for api: fake-api");
				}).models,
				new AbortController().signal,
			),
		);
		assert.match(thrown.message, /^the model anthropic\/claude-x failed: No API provider registered/);
	});

	it("an aborted request is an error, not an empty answer", async () => {
		const controller = new AbortController();
		const { models } = pi({}, async ({ options }) => {
			controller.abort();
			assert.ok(options.signal?.aborted);
			return answer("", { stopReason: "aborted", errorMessage: "Request was aborted" });
		});
		const error = await rejected(answerSampling(params(), models, controller.signal));
		assert.equal(error.message, "the request was cancelled");
	});

	it("refuses content pi cannot send, before asking the model", async () => {
		const { models, sent } = pi({ current: () => OTHER });
		const image = params({ messages: [{ role: "user", content: { type: "image", data: "AAAA", mimeType: "image/png" } }] });
		assert.match((await rejected(answerSampling(image, models, new AbortController().signal))).message, /openai\/gpt-y does not take images/);
		const audio = params({ messages: [{ role: "user", content: { type: "audio", data: "AAAA", mimeType: "audio/wav" } }] });
		const error = await rejected(answerSampling(audio, models, new AbortController().signal));
		assert.equal(error.message, "pi cannot send audio content to a model");
		assert.equal(error.code, ErrorCode.InvalidParams);
		assert.equal((await rejected(answerSampling(params({ messages: [] }), models, new AbortController().signal))).code, ErrorCode.InvalidParams);
		assert.equal(sent.length, 0);
	});

	it("shows the call while it is in flight, and not after, however it ended", async () => {
		const calls = new ModelCalls();
		const seen: string[][] = [];
		calls.subscribe(() => seen.push(calls.list().map((c) => `${c.model}: ${c.prompt}`)));
		await answerSampling(params(), pi().models, new AbortController().signal, calls.watch);
		const failing = pi({}, async () => {
			throw new Error("boom");
		});
		await rejected(answerSampling(params(), failing.models, new AbortController().signal, calls.watch));
		assert.deepEqual(seen, [["claude-x: Capital of France?"], [], ["claude-x: Capital of France?"], []]);
	});

	it("keeps only the start of a long prompt for the view", () => {
		const long = "word ".repeat(100_000);
		const text = lastUserText([{ role: "user", content: { type: "text", text: long } }]);
		assert.equal(text.length, PROMPT_PREVIEW_CHARS);
		assert.equal(lastUserText([{ role: "assistant", content: { type: "text", text: "x" } }]), "");
	});

	it("an answer with only thinking is an empty text, not an error", () => {
		const result = toResult(answer("", { content: [{ type: "thinking", thinking: "..." }] }), CURRENT);
		assert.deepEqual(result.content, { type: "text", text: "" });
	});
});
