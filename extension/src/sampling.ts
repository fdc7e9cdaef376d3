// A cell's `llm_query`, answered by pi's own model: pi-repl's `sampling/createMessage` requests.
//
// Owns: choosing the model (pi's current one, or the model a hint names when pi has it and can
// use it), its credentials (pi's model registry: auth.json, /login, environment, models.json),
// turning an MCP sampling request into a pi-ai completion (`completeSimple`) and its answer into
// an MCP result (text, model, stop reason, usage in `_meta["pi-repl/usage"]`), and the errors a
// cell gets when pi cannot answer. Does not own: the MCP exchange (client.ts declares `sampling`
// and routes the request here with its abort signal) or the live view (model-calls.ts).
//
// Invariants: no key leaves pi (the kernel gets only the answer); every failure is a
// `SamplingError` whose message says what to do (select a model, log in, what the provider said);
// the request's abort signal (pi-repl's `notifications/cancelled`, sent when the cell is
// interrupted) aborts the model request; a hint never picks a model pi cannot use.

import type { Api, AssistantMessage, Context, ImageContent, Message, Model, SimpleStreamOptions, TextContent } from "@mariozechner/pi-ai";
import type { CreateMessageRequest, CreateMessageResult } from "@modelcontextprotocol/sdk/types.js";
import { ErrorCode } from "@modelcontextprotocol/sdk/types.js";

/** The `_meta` key of a result's token usage: `{input_tokens, output_tokens}`. */
export const USAGE_META = "pi-repl/usage";

/** What the sampler needs of pi (the extension context's model and registry, pi-ai's completion). */
export interface PiModels {
	/** pi's current model; undefined when none is selected. */
	current(): Model<Api> | undefined;
	/** The models pi has credentials for (the registry's `getAvailable()`). */
	available(): Model<Api>[];
	/** The credentials for a model (the registry's `getApiKeyAndHeaders`). */
	auth(model: Model<Api>): Promise<{ ok: true; apiKey?: string; headers?: Record<string, string> } | { ok: false; error: string }>;
	/** One completion (pi-ai's `completeSimple`). */
	complete(model: Model<Api>, context: Context, options: SimpleStreamOptions): Promise<AssistantMessage>;
}

/** Characters of a prompt kept for the live view (it shows fewer; details must stay small). */
export const PROMPT_PREVIEW_CHARS = 480;

/** One model call in flight, as the live view shows it. */
export interface ModelCall {
	/** The start of the last user message's text (at most `PROMPT_PREVIEW_CHARS`). */
	prompt: string;
	/** The model's id. */
	model: string;
}

/** Told when a call starts; the function it returns is called when the call ends (however). */
export type CallWatcher = (call: ModelCall) => () => void;

export type SamplingParams = CreateMessageRequest["params"];

/** A sampling request pi cannot answer: a JSON-RPC error with this code and message. */
export class SamplingError extends Error {
	constructor(
		message: string,
		readonly code: number = ErrorCode.InternalError,
	) {
		super(message);
		this.name = "SamplingError";
	}
}

/** Answers one `sampling/createMessage` request with pi's model. Throws `SamplingError`. */
export async function answerSampling(
	params: SamplingParams,
	models: PiModels,
	signal: AbortSignal,
	watch?: CallWatcher,
): Promise<CreateMessageResult> {
	const model = chooseModel(params, models);
	const context: Context = { messages: toPiMessages(params.messages, model) };
	if (params.systemPrompt) context.systemPrompt = params.systemPrompt;
	const auth = await models.auth(model);
	if (!auth.ok) {
		throw new SamplingError(`pi has no usable credentials for ${label(model)}: ${auth.error} (log in with /login or set the provider's API key)`);
	}
	const options: SimpleStreamOptions = { signal, maxTokens: tokensFor(params.maxTokens, model) };
	if (auth.apiKey) options.apiKey = auth.apiKey;
	if (auth.headers) options.headers = auth.headers;
	if (typeof params.temperature === "number") options.temperature = params.temperature;
	const done = watch?.({ prompt: lastUserText(params.messages), model: model.id });
	let answer: AssistantMessage;
	try {
		answer = await models.complete(model, context, options);
	} catch (error) {
		if (signal.aborted) throw new SamplingError("the request was cancelled", ErrorCode.RequestTimeout);
		throw new SamplingError(`${label(model)} failed: ${error instanceof Error ? error.message : String(error)}${noKeyHint(auth)}`);
	} finally {
		done?.();
	}
	return toResult(answer, model, auth);
}

/** The model a request is answered by: a hint that names a model pi can use, else pi's current one. */
export function chooseModel(params: SamplingParams, models: PiModels): Model<Api> {
	const hints = (params.modelPreferences?.hints ?? []).map((hint) => hint.name).filter((name): name is string => typeof name === "string" && name !== "");
	if (hints.length > 0) {
		const usable = models.available();
		for (const hint of hints) {
			const named = usable.find((m) => `${m.provider}/${m.id}` === hint) ?? usable.find((m) => m.id === hint);
			if (named) return named;
		}
	}
	const current = models.current();
	if (!current) throw new SamplingError("pi has no model selected: choose one with /model (or pi --model) so llm_query can use it");
	return current;
}

/** MCP sampling messages as pi-ai messages (text and images; nothing else can be sent). */
export function toPiMessages(messages: SamplingParams["messages"], model: Model<Api>): Message[] {
	if (messages.length === 0) throw new SamplingError("the sampling request has no messages", ErrorCode.InvalidParams);
	return messages.map((message): Message => {
		const blocks = Array.isArray(message.content) ? message.content : [message.content];
		const content: (TextContent | ImageContent)[] = blocks.map((block) => {
			if (block.type === "text") return { type: "text", text: block.text };
			if (block.type === "image") {
				if (!model.input.includes("image")) throw new SamplingError(`${label(model)} does not take images`, ErrorCode.InvalidParams);
				if (message.role !== "user") throw new SamplingError("pi can send an image only in a user message", ErrorCode.InvalidParams);
				return { type: "image", data: block.data, mimeType: block.mimeType };
			}
			throw new SamplingError(`pi cannot send ${block.type} content to a model`, ErrorCode.InvalidParams);
		});
		if (message.role === "user") return { role: "user", content, timestamp: Date.now() };
		return {
			role: "assistant",
			content: content as TextContent[],
			api: model.api,
			provider: model.provider,
			model: model.id,
			usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
			stopReason: "stop",
			timestamp: Date.now(),
		};
	});
}

/** pi-ai's answer as an MCP `createMessage` result; a failed or aborted answer is a `SamplingError`. */
export function toResult(answer: AssistantMessage, model: Model<Api>, auth: { apiKey?: string } = { apiKey: "" }): CreateMessageResult {
	if (answer.stopReason === "aborted") throw new SamplingError("the request was cancelled", ErrorCode.RequestTimeout);
	if (answer.stopReason === "error") {
		throw new SamplingError(`${label(model)} failed: ${answer.errorMessage ?? "the provider reported an error"}${noKeyHint(auth)}`);
	}
	const text = answer.content
		.filter((block): block is TextContent => block.type === "text")
		.map((block) => block.text)
		.join("");
	const stopReason = answer.stopReason === "length" ? "maxTokens" : answer.stopReason === "toolUse" ? "toolUse" : "endTurn";
	return {
		model: `${model.provider}/${model.id}`,
		role: "assistant",
		content: { type: "text", text },
		stopReason,
		_meta: { [USAGE_META]: { input_tokens: answer.usage.input, output_tokens: answer.usage.output } },
	};
}

/** The request's `maxTokens`, no more than the model can give. */
function tokensFor(requested: number, model: Model<Api>): number {
	return model.maxTokens > 0 ? Math.min(requested, model.maxTokens) : requested;
}

/** The start of the last user message's text (what the live view shows). */
export function lastUserText(messages: SamplingParams["messages"]): string {
	const last = [...messages].reverse().find((m) => m.role === "user");
	if (!last) return "";
	const blocks = Array.isArray(last.content) ? last.content : [last.content];
	let text = "";
	for (const block of blocks) {
		text += `${text ? " " : ""}${block.type === "text" ? block.text.slice(0, PROMPT_PREVIEW_CHARS) : `[${block.type}]`}`;
		if (text.length >= PROMPT_PREVIEW_CHARS) break;
	}
	return text.slice(0, PROMPT_PREVIEW_CHARS);
}

function label(model: Model<Api>): string {
	return `the model ${model.provider}/${model.id}`;
}

function noKeyHint(auth: { apiKey?: string }): string {
	return auth.apiKey ? "" : " (pi found no API key for this provider: log in with /login or set its API key)";
}
