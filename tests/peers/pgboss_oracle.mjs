// The truth oracle's pg-boss workloads (tests/oracle/pgboss.py), made through pg-boss's own API.
//   node pgboss_oracle.mjs CONNECTION_STRING 10|9 SPEC_JSON
// SPEC_JSON: {"installs": [{"schema": "pgboss", "queues": [QUEUE, ...]}, ...]}; one PgBoss per
// install (the `schema` constructor option), so one database may hold several installs.
// QUEUE: {name, policy?, completed, failed, retry, expired, active, worker, blocked,
//         singleton_queue, scheduled: [[count, seconds ahead], ...], ready: [[count, priority], ...]}
// Each queue is built in this order, so that every fetch finds due exactly the jobs it is meant
// to take: completed (inserted, fetched, completed), failed for good (retryLimit 0, fetched,
// failed), retry back-off (retryLimit 3, retryDelay 600 s, fetched, failed once), expired (v9:
// expireInSeconds 1, fetched, expired by pg-boss's own expire()), active (fetched, never
// completed), one job held by a real worker (work()), v9's singleton queue (sendSingleton: one
// fetched, one queued), blocked (v10: created while the singleton/stately queue has one active),
// scheduled (startAfter ahead), ready. Batches go through insert([...]), fetch with batchSize,
// complete/fail with arrays of ids. Prints one JSON line {"ready": true, "build_s", "phases_s"}
// once all is in place, then holds the active and worker jobs until standard input closes.
import { createRequire } from 'node:module'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const [connectionString, major, specJson] = process.argv.slice(2)
const spec = JSON.parse(specJson)
const v10 = major !== '9'
const PgBoss = require(v10 ? 'pg-boss' : 'pg-boss-9')
const CHUNK = 10000 // jobs per insert / fetch / complete / fail call
const started = Date.now()
const phases = {}

const timed = async (phase, work) => {
  const t0 = Date.now()
  try {
    return await work()
  } finally {
    phases[phase] = (phases[phase] || 0) + (Date.now() - t0) / 1000
  }
}

const open = async (schema) => {
  const boss = new PgBoss({
    connectionString,
    schema,
    max: 4,
    ...(v10 ? { supervise: false, schedule: false } : { noSupervisor: true, noScheduling: true })
  })
  boss.on('error', (error) => console.error(error))
  await boss.start()
  return boss
}

// The two APIs, one shape: v10 names the queue on every call, v9 does not.
const api = (boss) => ({
  fetch: async (name, batchSize) => (v10 ? await boss.fetch(name, { batchSize }) : await boss.fetch(name, batchSize)) || [],
  complete: (name, ids) => (v10 ? boss.complete(name, ids) : boss.complete(ids)),
  fail: (name, ids, data) => (v10 ? boss.fail(name, ids, data) : boss.fail(ids, data)),
  // v10 reads startAfter as seconds from the database's now(); v9's insert wants a timestamp.
  startAfter: (seconds) => (v10 ? String(seconds) : new Date(Date.now() + seconds * 1000).toISOString())
})

const jobs = (name, count, options = {}, offset = 0) =>
  Array.from({ length: count }, (_, n) => ({ name, data: { n: offset + n }, ...options }))

async function insertAll (boss, name, count, options) {
  for (let done = 0; done < count; done += CHUNK) {
    await boss.insert(jobs(name, Math.min(CHUNK, count - done), options, done))
  }
}

// Insert `count` jobs and fetch exactly them (nothing else of the queue is due yet).
async function insertAndFetch (boss, b, name, count, options) {
  const fetched = []
  for (let done = 0; done < count; done += CHUNK) {
    const size = Math.min(CHUNK, count - done)
    await boss.insert(jobs(name, size, options, done))
    const got = await b.fetch(name, size)
    if (got.length !== size) throw new Error(`${name}: fetched ${got.length} of ${size}`)
    fetched.push(...got.map((job) => job.id))
  }
  return fetched
}

async function finish (boss, b, name, count, options, how) {
  if (!count) return
  const ids = await insertAndFetch(boss, b, name, count, options)
  for (let done = 0; done < ids.length; done += CHUNK) {
    const batch = ids.slice(done, done + CHUNK)
    if (how === 'complete') await b.complete(name, batch)
    else await b.fail(name, batch, { message: `${name} failed` })
  }
}

const gates = []
const expiring = []

async function buildQueue (boss, q) {
  const b = api(boss)
  await timed('completed', () => finish(boss, b, q.name, q.completed || 0, {}, 'complete'))
  await timed('failed', () => finish(boss, b, q.name, q.failed || 0, { retryLimit: 0 }, 'fail'))
  await timed('retry', () => finish(boss, b, q.name, q.retry || 0, { retryLimit: 3, retryDelay: 600 }, 'fail'))
  if (q.expired) {
    expiring.push(...await timed('expired', () => insertAndFetch(boss, b, q.name, q.expired, { retryLimit: 0, expireInSeconds: 1 })))
  }
  if (q.active) await timed('active', () => insertAndFetch(boss, b, q.name, q.active, {}))
  if (q.worker) {
    await timed('worker', async () => {
      await boss.insert(jobs(q.name, 1))
      let release
      const gate = new Promise((resolve) => { release = resolve })
      gates.push(() => release())
      await new Promise((resolve) => {
        const handler = async () => { resolve(); await gate }
        if (v10) boss.work(q.name, { batchSize: 1, pollingIntervalSeconds: 0.5 }, handler)
        else boss.work(q.name, { teamSize: 1, teamConcurrency: 1, newJobCheckInterval: 500 }, handler)
      })
    })
  }
  if (q.singleton_queue) { // v9: a singleton queue holds one queued job while one is active
    await boss.sendSingleton(q.name, { n: 'first' })
    const got = await b.fetch(q.name, 1)
    if (got.length !== 1) throw new Error(`${q.name}: the singleton job was not fetched`)
    if (!await boss.sendSingleton(q.name, { n: 'second' })) throw new Error(`${q.name}: the second singleton job was refused`)
  }
  if (q.blocked) await timed('blocked', () => insertAll(boss, q.name, q.blocked, {}))
  for (const [count, seconds] of q.scheduled || []) {
    await timed('scheduled', () => insertAll(boss, q.name, count, { startAfter: b.startAfter(seconds) }))
  }
  for (const [count, priority] of q.ready || []) {
    await timed('ready', () => insertAll(boss, q.name, count, { priority }))
  }
}

const bosses = []
for (const install of spec.installs) {
  const boss = await timed('start', () => open(install.schema))
  bosses.push(boss)
  // v10's create_queue attaches a partition: one at a time (two at once can deadlock).
  if (v10) {
    for (const q of install.queues) await timed('createQueue', () => boss.createQueue(q.name, q.policy ? { policy: q.policy } : {}))
  }
  // Then the queues are independent: built side by side, two at a time (a pool of 4 connections).
  const queue = [...install.queues]
  const lane = async () => { while (queue.length) await buildQueue(boss, queue.shift()) }
  await Promise.all([lane(), lane()])
  if (!v10 && expiring.length) {
    // pg-boss 9's own expire(): active past expireIn, no retry left -> expired.
    await timed('expired', async () => {
      const deadline = Date.now() + 30000
      for (;;) {
        await boss.expire()
        const states = await Promise.all(expiring.map((id) => boss.getJobById(id)))
        if (states.every((job) => job && job.state === 'expired')) break
        if (Date.now() > deadline) throw new Error('jobs did not expire within 30 s')
        await new Promise((resolve) => setTimeout(resolve, 200))
      }
    })
    expiring.length = 0
  }
}

console.log(JSON.stringify({ ready: true, build_s: (Date.now() - started) / 1000, phases_s: phases }))

process.stdin.resume()
process.stdin.on('end', async () => {
  for (const release of gates) release()
  await Promise.all(bosses.map((boss) => boss.stop({ graceful: false, wait: false })))
  process.exit(0)
})
