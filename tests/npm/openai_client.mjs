// The official `openai` npm client against a running `tandem serve`:
//   node openai_client.mjs BASE_URL API_KEY [VICTIM_PIDS [COORDINATOR_PID]]
// Completions and chat completions, streaming and not (a stream's pieces must
// add up to the non-streaming text, greedy), 8 concurrent streams that must
// each give the same text as their prompt's non-streaming request, and a bad
// request surfacing as the client's APIError with status 400. With
// VICTIM_PIDS (comma-separated pids: expert workers, gpu worker, loader):
// 8 concurrent greedy streams during which each of those processes is
// SIGKILLed in turn must all finish with the tokens of an undisturbed run.
// With COORDINATOR_PID: 8 streams during which the coordinator is SIGKILLed
// must each end with a clean client error (no hang), and a new request must
// then succeed with the undisturbed text. Prints one JSON summary line;
// exits non-zero on the first mismatch.
import OpenAI from "openai";

const [baseURL, apiKey, victimPids, coordinatorPid] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: apiKey || "none", maxRetries: 0, timeout: 120000 });

function check(cond, what) {
  if (!cond) {
    console.error("FAILED:", what);
    process.exit(1);
  }
}

const models = await client.models.list();
const model = models.data[0].id;
check(models.data.length === 1 && typeof model === "string", "models.list returns the served model");

const completion = await client.completions.create({ model, prompt: "Hello world", max_tokens: 12, temperature: 0 });
const text = completion.choices[0].text;
check(completion.usage.completion_tokens > 0, "completion usage counts tokens");
let streamed = "";
for await (const chunk of await client.completions.create({ model, prompt: "Hello world", max_tokens: 12, temperature: 0, stream: true }))
  streamed += chunk.choices[0]?.text ?? "";
check(streamed === text, `completion stream ${JSON.stringify(streamed)} == ${JSON.stringify(text)}`);

async function chat(content, stream, maxTokens = 10, onChunk = () => {}) {
  const req = { model, messages: [{ role: "user", content }], max_tokens: maxTokens, temperature: 0 };
  if (!stream) return (await client.chat.completions.create(req)).choices[0].message.content;
  let s = "";
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    s += chunk.choices[0]?.delta?.content ?? "";
    onChunk();
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  check(finish === "length" || finish === "stop", `chat stream ends with a finish reason (${finish})`);
  return s;
}

const prompts = ["hi", "tell me a story", "2+2?", "hello there", "what is MoE?", "abc", "xyz", "one more"];
const expected = [];
for (const p of prompts) expected.push(await chat(p, false));
check((await chat(prompts[0], true)) === expected[0], "chat stream == chat");
const concurrent = await Promise.all(prompts.map((p) => chat(p, true)));
for (let i = 0; i < prompts.length; ++i)
  check(concurrent[i] === expected[i], `concurrent stream ${i}: ${JSON.stringify(concurrent[i])} == ${JSON.stringify(expected[i])}`);

// The 8 concurrent streams shared forward passes (continuous batching).
const metrics = await (await fetch(baseURL.replace(/\/v1$/, "/metrics"), { headers: { Authorization: `Bearer ${apiKey}` } })).text();
const batch = Number((metrics.match(/^tandem_step_sequences_max (\d+)$/m) ?? [])[1]);
check(batch >= 2, `batched steps: tandem_step_sequences_max = ${batch}`);

let status = 0;
try {
  await client.completions.create({ model, prompt: "x", max_tokens: 4, temperature: 7 });
} catch (e) {
  status = e.status;
}
check(status === 400, `a bad temperature is a 400 APIError (got ${status})`);

let killed = [];
const long = [];
if (victimPids) {
  // Fault test: the processes die one after the other while 8 streams run.
  const victims = victimPids.split(",").map(Number);
  for (const p of prompts) long.push(await chat(p, false, 48));
  let chunks = 0;
  const onChunk = () => {
    ++chunks;
    // The first kill once every stream is under way, the next ones spread out.
    const due = 8 + killed.length * 48;
    if (killed.length < victims.length && chunks >= due) {
      process.kill(victims[killed.length], "SIGKILL");
      killed.push(victims[killed.length]);
    }
  };
  const faulted = await Promise.all(prompts.map((p) => chat(p, true, 48, onChunk)));
  check(killed.length === victims.length, `all ${victims.length} processes were killed mid-stream (${killed.length}, ${chunks} chunks)`);
  for (let i = 0; i < prompts.length; ++i)
    check(faulted[i] === long[i], `stream ${i} with process kills: ${JSON.stringify(faulted[i])} == ${JSON.stringify(long[i])}`);
}

let coordinatorErrors = 0;
if (coordinatorPid) {
  // The coordinator dies mid-stream: every client gets an error, none hangs;
  // the launcher restarts it on the same port and new requests succeed.
  let chunks = 0;
  let done = false;
  const onChunk = () => {
    if (++chunks === 16 && !done) {
      done = true;
      process.kill(Number(coordinatorPid), "SIGKILL");
    }
  };
  // A stream cut off shows as the client's error, or as a stream that ends
  // without a finish reason (no [DONE]): either way the client knows.
  const cut = async (content) => {
    let finish = null;
    const req = { model, messages: [{ role: "user", content }], max_tokens: 48, temperature: 0, stream: true };
    try {
      for await (const chunk of await client.chat.completions.create(req)) {
        onChunk();
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
    } catch (e) {
      return `error: ${e.constructor.name}`;
    }
    return finish === null ? "cut off" : `finished (${finish})`;
  };
  const outcomes = await Promise.all(prompts.map(cut));
  check(done, "the coordinator was killed mid-stream");
  for (const [i, o] of outcomes.entries())
    check(!o.startsWith("finished"), `stream ${i} ended with an error or cut off after the coordinator was killed (${o})`);
  coordinatorErrors = outcomes;
  const after = await chat(prompts[1], false, 48);
  check(after === long[1], `after the coordinator restart: ${JSON.stringify(after)} == ${JSON.stringify(long[1])}`);
}

console.log(JSON.stringify({ ok: true, model, completion: text, chats: expected.length, concurrent: concurrent.length, largestBatch: batch, killed, coordinatorErrors }));
