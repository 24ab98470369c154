// The truth oracle's Graphile Worker workloads (tests/oracle/graphile.py), made through Graphile
// Worker's own API only: WorkerUtils (addJob, addJobs, completeJobs, permanentlyFailJobs,
// rescheduleJobs), runOnce and run with real task functions, all in the given schema.
//   node graphile_oracle.mjs CONNECTION_STRING SCHEMA small|large
// Prints one JSON line {"ready": true, "seconds": ..., "jobs": N} once the workload is built; the
// workers it started keep their jobs (running, holding their named queues) until standard input
// closes. Shapes (task:<identifier> / queue:<name> x state) are in tests/oracle/graphile.py.
import { createRequire } from 'node:module'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const { makeWorkerUtils, runOnce, run, Logger } = require('graphile-worker')
const [connectionString, schema, size] = process.argv.slice(2)
if (!['small', 'large'].includes(size)) throw new Error(`usage: graphile_oracle.mjs DSN SCHEMA small|large, not ${size}`)
const logger = new Logger(() => () => {})
const common = { connectionString, schema, logger }
const began = Date.now()

const utils = await makeWorkerUtils(common)
await utils.migrate()

const MINUTE = 60_000
const HOUR = 60 * MINUTE
const later = (ms) => new Date(Date.now() + ms)

// A task that fails when its payload says so (Graphile records the error and backs off, or
// gives the job up once its attempts are spent) and succeeds otherwise.
const mayFail = (name) => async (payload) => {
  if (payload.fail) throw new Error(`${name} failed: ${payload.why ?? 'on purpose'}`)
}

// Tasks that start and then wait, each holding its job (locked, and its named queue with it),
// until release(); `started` resolves once `count` of them run.
function holding (count) {
  let release
  const gate = new Promise((resolve) => { release = resolve })
  let running = 0
  let allStarted
  const started = new Promise((resolve) => { allStarted = resolve })
  const task = async () => {
    running += 1
    if (running === count) allStarted()
    await gate
  }
  return { task, started, release }
}

// A job that has failed before: `attempts` set as its earlier runs left it (rescheduleJobs), then a
// real worker runs it once more and it throws, so Graphile's own fail path writes its back-off
// (run_at = now + exp(attempts) seconds: e^8 s, about 50 minutes, after the 8th attempt).
const PRIOR_ATTEMPTS = 7

async function addBatched (specs, chunk = 10_000) {
  const out = []
  for (let i = 0; i < specs.length; i += chunk) out.push(...await utils.addJobs(specs.slice(i, i + chunk)))
  return out
}

async function inChunks (ids, fn, chunk = 20_000) {
  for (let i = 0; i < ids.length; i += chunk) await fn(ids.slice(i, i + chunk))
}

let runner
let holder
let jobs = 0

if (size === 'small') {
  // 1. A real worker fails and finishes jobs: send_email and thumb each get one given up (max 1
  //    attempt) and one backing off; send_email and cleanup each finish two (deleted).
  const failing = [
    await utils.addJob('send_email', { to: 'bounce@example.com', fail: true, why: 'mailbox full' }, { maxAttempts: 1 }),
    await utils.addJob('thumb', { image: 'broken.png', fail: true, why: 'not an image' }, { maxAttempts: 1 }),
  ]
  const backingOff = [
    await utils.addJob('send_email', { to: 'flaky@example.com', fail: true, why: 'smtp timeout' }, { maxAttempts: 25 }),
    await utils.addJob('thumb', { image: 'slow.png', fail: true, why: 'timeout' }, { maxAttempts: 25, queueName: 'exports' }),
  ]
  await utils.rescheduleJobs(backingOff.map((j) => j.id), { attempts: PRIOR_ATTEMPTS })
  for (let n = 0; n < 2; n++) await utils.addJob('send_email', { to: `done${n}@example.com` })
  for (let n = 0; n < 2; n++) await utils.addJob('cleanup', { n })
  await runOnce({ ...common, taskList: { send_email: mayFail('send_email'), thumb: mayFail('thumb'), cleanup: mayFail('cleanup') } })

  // 2. The other API paths: one finished by completeJobs, two failed for good by permanentlyFailJobs.
  const toComplete = await utils.addJob('thumb', { image: 'done.png' })
  await utils.completeJobs([toComplete.id])
  const toFail = [
    await utils.addJob('send_email', { to: 'gone@example.com' }),
    await utils.addJob('report', { report: 'obsolete' }, { queueName: 'reports' }),
  ]
  await utils.permanentlyFailJobs(toFail.map((j) => j.id), 'given up by an operator')

  // 3. Scheduled ahead.
  for (let n = 0; n < 2; n++) await utils.addJob('send_email', { to: `later${n}@example.com` }, { runAt: later(HOUR) })
  await utils.addJob('thumb', { image: 'tomorrow.png' }, { runAt: later(2 * HOUR), queueName: 'exports' })
  await utils.addJob('report', { report: 'nightly' }, { runAt: later(HOUR), queueName: 'reports' })

  // 4. A real worker takes the only three due jobs and holds them: report 1 locks its named
  //    queue "reports". Its three slots are busy: it fetches nothing more.
  await utils.addJob('send_email', { to: 'running@example.com' })
  await utils.addJob('thumb', { image: 'running.png' })
  await utils.addJob('report', { report: 1 }, { queueName: 'reports' })
  holder = holding(3)
  runner = await run({
    ...common, concurrency: 3, pollInterval: 200, noHandleSignals: true,
    taskList: { send_email: holder.task, thumb: holder.task, report: holder.task },
  })
  await holder.started

  // 5. Due jobs after that: ready ones, and three behind the locked queue "reports" (blocked).
  for (let n = 0; n < 3; n++) await utils.addJob('send_email', { to: `now${n}@example.com` })
  for (let n = 0; n < 2; n++) await utils.addJob('thumb', { image: `now${n}.png` })
  await utils.addJob('thumb', { image: 'export.png' }, { queueName: 'exports' })
  await utils.addJob('report', { report: 2 }, { queueName: 'reports' })
  await utils.addJob('report', { report: 3 }, { queueName: 'reports' })
  await utils.addJob('thumb', { image: 'report-chart.png' }, { queueName: 'reports' })
  jobs = 22 // rows left: 27 added, 5 finished (deleted)
} else {
  // Small figures first, made by real workers: task mail (7 given up, 2 backing off, 5 ready);
  // task slow in named queue "serial", one running and holding the queue, three blocked behind it.
  const mailDead = []
  for (let n = 0; n < 7; n++) mailDead.push(await utils.addJob('mail', { n, fail: true, why: 'mailbox full' }, { maxAttempts: 1 }))
  const mailRetry = []
  for (let n = 0; n < 2; n++) mailRetry.push(await utils.addJob('mail', { n, fail: true, why: 'smtp timeout' }))
  await utils.rescheduleJobs(mailRetry.map((j) => j.id), { attempts: PRIOR_ATTEMPTS })
  await runOnce({ ...common, taskList: { mail: mayFail('mail') } })
  for (let n = 0; n < 5; n++) await utils.addJob('mail', { n })

  await utils.addJob('slow', { n: 0 }, { queueName: 'serial' })
  holder = holding(1)
  runner = await run({ ...common, concurrency: 1, pollInterval: 1000, noHandleSignals: true, taskList: { slow: holder.task } })
  await holder.started
  for (let n = 1; n <= 3; n++) await utils.addJob('slow', { n }, { queueName: 'serial' })

  // The bulk, through addJobs (a batch API), correlated: task thumb holds the whole backlog
  // (160,000 ready, skewed priorities, run_at spread over the last hour); task archive only jobs
  // failed for good (62,000, permanentlyFailJobs); task digest only scheduled ones, bimodal
  // (12,000 at +15 min, 15,000 at +6 h); task notify in named queue "fanout" 20,000 ready and
  // 11,000 rescheduled 30 minutes ahead after 3 attempts (backing off).
  const now = Date.now()
  const thumbs = []
  for (let n = 0; n < 160_000; n++) {
    const priority = n % 160 === 0 ? -5 : n % 160 < 10 ? 5 : 0 // 1,000 urgent, 9,000 low, 150,000 normal
    thumbs.push({ identifier: 'thumb', payload: { n }, priority, runAt: new Date(now - (n % 3600) * 1000) })
  }
  await addBatched(thumbs)
  const archive = await addBatched(Array.from({ length: 62_000 }, (_, n) => ({ identifier: 'archive', payload: { n } })))
  await inChunks(archive.map((j) => j.id), (ids) => utils.permanentlyFailJobs(ids, 'archive store gone'))
  await addBatched(Array.from({ length: 27_000 }, (_, n) => ({
    identifier: 'digest', payload: { n }, runAt: new Date(now + (n < 12_000 ? 15 * MINUTE : 6 * HOUR) + (n % 60) * 1000),
  })))
  const notify = await addBatched(Array.from({ length: 31_000 }, (_, n) => ({ identifier: 'notify', payload: { n }, queueName: 'fanout' })))
  await inChunks(notify.slice(20_000).map((j) => j.id), (ids) => utils.rescheduleJobs(ids, { runAt: later(30 * MINUTE), attempts: 3 }))
  jobs = 7 + 2 + 5 + 4 + 160_000 + 62_000 + 27_000 + 31_000
}

console.log(JSON.stringify({ ready: true, seconds: (Date.now() - began) / 1000, jobs }))

process.stdin.resume()
process.stdin.on('end', async () => {
  holder?.release()
  await runner?.stop()
  await utils.release()
  process.exit(0)
})
