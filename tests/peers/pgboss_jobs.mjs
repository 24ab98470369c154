// pg-boss jobs in every state, made through pg-boss's own API, then driven by commands, for the
// job console's tests (tests/test_jobs_pgboss.py).
//   node pgboss_jobs.mjs CONNECTION_STRING 10|9 [archive]
// Queue "mail": F1, F2 failed for good (a failed handler's Error, retryLimit 0); R1 failed once,
// retrying after a 10-minute back-off; A1 active (fetched, never completed); D1, D2 completed;
// D3 cancelled; L1, L2, L3 scheduled an hour ahead; W1, W2, W3 ready. With `archive`, first a job
// "gone" completed and moved to the archive by pg-boss's own archive(). Queue "solo": S1 active,
// S2 due behind it (v10: a singleton queue, so S2 is blocked; v9: ready). Queue "bulk": 60 ready
// jobs, data {n, to, tag} (tag "vip" every third). Queue "keyed": K1 and K2 failed, K3 of K1's
// singleton key retrying later (see below). Prints {"ready": true, "ids": {...}}, then runs
// one JSON command a line from standard input, each answered by a line with its "seq":
//   {"op": "cancel", "queue", "id"}     pg-boss's cancel -> {"count"}
//   {"op": "complete"|"fail", "queue", "id"}   its complete / fail -> {"count"} (rows it changed)
//   {"op": "retry", "queue", "id"}      v10's retry, v9's resume -> {"count"}, or {"refused": why}
//   {"op": "get", "queue", "ids"}       its getJobById of each -> {"jobs": {id: state or null}}
//   {"op": "work", "queue"}             a worker (work(), batchSize 50, polling every 0.5 s):
//                                       each batch it is handed is printed {"batch": [ids], "queue"}
//                                       before its handler returns (and pg-boss completes them)
// Standard input closing ends it.
import { createRequire } from 'node:module'
import readline from 'node:readline'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const [connectionString, major, extra] = process.argv.slice(2)
const v10 = major !== '9'
const PgBoss = require(v10 ? 'pg-boss' : 'pg-boss-9')

const boss = new PgBoss({
  connectionString,
  max: 4,
  // Completed jobs archived a second after completion (when archive() is called: no supervisor
  // runs it here); failed ones kept.
  archiveCompletedAfterSeconds: 1,
  archiveFailedAfterSeconds: 3600,
  ...(v10 ? { supervise: false, schedule: false } : { noSupervisor: true, noScheduling: true })
})
boss.on('error', (error) => console.error(error))
await boss.start()

const say = (value) => console.log(JSON.stringify(value))
const fetchOne = async (name) => {
  const got = await boss.fetch(name)
  const job = Array.isArray(got) ? got[0] : got
  if (!job) throw new Error(`${name}: nothing fetched`)
  return job
}
const complete = (name, id) => (v10 ? boss.complete(name, id) : boss.complete(id))
const fail = (name, id, data) => (v10 ? boss.fail(name, id, data) : boss.fail(id, data))
const cancel = (name, id) => (v10 ? boss.cancel(name, id) : boss.cancel(id))
const getJob = (name, id) => (v10 ? boss.getJobById(name, id) : boss.getJobById(id))
const counted = (result) => (result ? (v10 ? result.affected : result.updated) : null)
const data = (tag) => ({ to: `${tag.toLowerCase()}@example.com`, tag })
const ids = {}

if (v10) {
  await boss.createQueue('mail')
  await boss.createQueue('solo', { policy: 'singleton' })
  await boss.createQueue('bulk')
}

// Each fetched job is sent and fetched on its own: the fetch takes exactly that one.
const sentAndFetched = async (tag, options = {}) => {
  const id = await boss.send('mail', data(tag), options)
  const job = await fetchOne('mail')
  if (job.id !== id) throw new Error(`${tag}: fetched ${job.id}, not ${id}`)
  ids[tag] = id
  return id
}

if (extra === 'archive') {
  // pg-boss's own archive(): completed over a second ago -> moved to the archive table.
  const id = await sentAndFetched('gone')
  await complete('mail', id)
  const deadline = Date.now() + 15000
  for (;;) {
    await boss.archive()
    // v10: gone from the job table, in the archive (includeArchive); v9: getJobById reads both,
    // the archive's row has archivedOn.
    const found = await getJob('mail', id)
    if (v10 ? (!found && await boss.getJobById('mail', id, { includeArchive: true })) : (found && found.archivedon)) break
    if (Date.now() > deadline) throw new Error('the job was not archived within 15 s')
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
for (const tag of ['D1', 'D2']) await complete('mail', await sentAndFetched(tag))
for (const tag of ['F1', 'F2']) await fail('mail', await sentAndFetched(tag, { retryLimit: 0 }), new Error(`smtp timeout ${tag}`))
await fail('mail', await sentAndFetched('R1', { retryLimit: 3, retryDelay: 600 }), new Error('try later'))
await sentAndFetched('A1')
ids.D3 = await boss.send('mail', data('D3'), { startAfter: 3600 })
await cancel('mail', ids.D3)
for (const tag of ['L1', 'L2', 'L3']) ids[tag] = await boss.send('mail', data(tag), { startAfter: 3600 })
for (const tag of ['W1', 'W2', 'W3']) ids[tag] = await boss.send('mail', data(tag))

ids.S1 = await boss.send('solo', data('S1'))
if ((await fetchOne('solo')).id !== ids.S1) throw new Error('solo: S1 not fetched')
ids.S2 = await boss.send('solo', data('S2'))
if (!ids.S2) throw new Error('solo: S2 refused')

// Queue "keyed" (v10: a stately queue): K1 failed for good, K2 (no key) too, then K3 of K1's key
// failed once and retrying later. Retrying K1 would make a second waiting job of that key:
// pg-boss's unique index (v10 job_i3 (name, state, key); v9 job_singletonKey) refuses it.
if (v10) await boss.createQueue('keyed', { policy: 'stately' })
ids.K1 = await boss.send('keyed', data('K1'), { singletonKey: 'k', retryLimit: 0 })
if ((await fetchOne('keyed')).id !== ids.K1) throw new Error('keyed: K1 not fetched')
await fail('keyed', ids.K1, new Error('K1 failed'))
ids.K2 = await boss.send('keyed', data('K2'), { retryLimit: 0 }) // no key: free to be retried
if ((await fetchOne('keyed')).id !== ids.K2) throw new Error('keyed: K2 not fetched')
await fail('keyed', ids.K2, new Error('K2 failed'))
ids.K3 = await boss.send('keyed', data('K3'), { singletonKey: 'k', retryLimit: 3, retryDelay: 600 })
if (!ids.K3) throw new Error('keyed: K3 refused')
if ((await fetchOne('keyed')).id !== ids.K3) throw new Error('keyed: K3 not fetched')
await fail('keyed', ids.K3, new Error('K3 failed once'))

await boss.insert(Array.from({ length: 60 }, (_, n) => ({
  name: 'bulk', data: { n, to: `user${n}@example.com`, tag: n % 3 === 0 ? 'vip' : 'std' }
})))
say({ ready: true, ids })

const lines = readline.createInterface({ input: process.stdin })
for await (const line of lines) {
  const command = JSON.parse(line)
  const { op, queue, seq } = command
  try {
    if (op === 'cancel') {
      say({ seq, count: counted(await cancel(queue, command.id)) })
    } else if (op === 'complete') {
      say({ seq, count: counted(await complete(queue, command.id)) })
    } else if (op === 'fail') {
      say({ seq, count: counted(await fail(queue, command.id, new Error('failed from the test'))) })
    } else if (op === 'retry') {
      // v10's retry(), v9's resume() (its way back for a failed job): {count}, or why it threw
      try {
        say({ seq, count: counted(await (v10 ? boss.retry(queue, command.id) : boss.resume(command.id))) })
      } catch (error) {
        say({ seq, refused: String(error.message) })
      }
    } else if (op === 'get') {
      const jobs = {}
      for (const id of command.ids) {
        const job = await getJob(queue, id)
        jobs[id] = job ? job.state : null
      }
      say({ seq, jobs })
    } else if (op === 'work') {
      const handler = async (batch) => { say({ batch: batch.map((job) => job.id), queue }) }
      const options = v10 ? { batchSize: 50, pollingIntervalSeconds: 0.5 } : { batchSize: 50, newJobCheckInterval: 500 }
      say({ seq, worker: await boss.work(queue, options, handler) })
    } else {
      say({ seq, error: `unknown op ${op}` })
    }
  } catch (error) {
    say({ seq, error: String(error && error.stack ? error.stack : error) })
  }
}
await boss.stop({ graceful: false, wait: false })
process.exit(0)
