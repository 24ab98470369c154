// The condition behind each of queuetop's queue verdicts, made for real through pg-boss's own API
// (createQueue, send, insert, work), for tests/test_diagnosis_pgboss.py.
//   node pgboss_diagnose.mjs CONNECTION_STRING CAUSE        (pg-boss 10)
// Prints one JSON line {"ready": true, "queue": NAME, ...} once the condition is in place, and
// holds it (its workers and senders keep going) until standard input closes.
//
// CAUSE:
//   no-consumers         queue "orphan": 5 jobs sent, no worker anywhere
//   no-consumers-beside  the same, beside queue "busy" that a worker (up to 10 at a time, 400 ms
//                        a batch) works under a job sent every 250 ms
//   no-consumers-maintained  the same as no-consumers, pg-boss's maintenance run every second
//   blocked              queue "stuck": 200 jobs, one slow worker (batchSize 1, polling 0.5 s)
//                        that has started on them; the test then locks the table
//   failing              queue "flaky" (retryLimit 0): a worker whose handler throws, a job sent
//                        every 200 ms
//   bloat                queue "churn": 10 jobs inserted every 100 ms, a worker taking up to 200
//                        at a time (400 ms a batch); the test holds the xmin horizon
//   saturated            queue "slow": a job sent every 100 ms, one worker (batchSize 1) whose
//                        handler takes 400 ms (it fetches again at once: always at work)
//   healthy              queue "steady": a job sent every 200 ms, a worker that keeps up (up to
//                        10 at a time, 400 ms a batch)
//   polled-slowly        queue "polled": 10 jobs sent at once every second, a worker polling
//                        every 5 s that takes up to 100 at a time and handles them at once
import { createRequire } from 'node:module'
import { setTimeout as sleep } from 'node:timers/promises'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const [connectionString, cause] = process.argv.slice(2)
const PgBoss = require('pg-boss')

// pg-boss as an application runs it: its supervisor (maintenance, every 2 minutes) on, cron
// scheduling off. `no-consumers-maintained`: its maintenance every second, as if 2 minutes had gone.
const maintenance = cause === 'no-consumers-maintained' ? { maintenanceIntervalSeconds: 1 } : {}
const boss = new PgBoss({ connectionString, schedule: false, ...maintenance })
boss.on('error', (error) => console.error(error.message))
await boss.start()

let running = true
const loops = []
// Calls `fn` every `ms` (never two at once) until standard input closes.
const every = (ms, fn) => loops.push((async () => {
  while (running) {
    const started = Date.now()
    try { await fn() } catch (error) { if (running) console.error(error.message) }
    await sleep(Math.max(0, ms - (Date.now() - started)))
  }
})())

const createQueue = (name, options = {}) => boss.createQueue(name, options)
// One worker on `name`, fetching `batchSize` jobs at a time, polling every `polling` seconds.
const work = (name, batchSize, handler, polling = 0.5) =>
  boss.work(name, { batchSize, pollingIntervalSeconds: polling }, handler)
const send = (name, data, options = {}) => boss.send(name, data, options)
const insert = (name, count, first) =>
  boss.insert(Array.from({ length: count }, (_, i) => ({ name, data: { n: first + i } })))

let n = 0
const report = { ready: true, cause }
switch (cause) {
  case 'no-consumers':
  case 'no-consumers-maintained':
  case 'no-consumers-beside': {
    await createQueue('orphan')
    for (let i = 0; i < 5; i++) await send('orphan', { n: i })
    report.queue = 'orphan'
    if (cause === 'no-consumers-maintained') {
      // Once its maintenance has run (expire, archive, drop: a DELETE on pgboss.job).
      await new Promise((resolve) => boss.once('maintenance', resolve))
    }
    if (cause === 'no-consumers-beside') {
      await createQueue('busy')
      let first
      const taken = new Promise((resolve) => { first = resolve })
      await work('busy', 10, async () => { first(); await sleep(400) })
      every(250, () => send('busy', { n: n++ }))
      await taken
      report.beside = 'busy'
    }
    break
  }
  case 'blocked': {
    await createQueue('stuck')
    await insert('stuck', 200, 0)
    let first
    const started = new Promise((resolve) => { first = resolve })
    await work('stuck', 1, async () => { first(); await sleep(300) })
    await started
    report.queue = 'stuck'
    break
  }
  case 'failing': {
    await createQueue('flaky', { retryLimit: 0 })
    await work('flaky', 1, async () => { throw new Error('handler failed: upstream refused') })
    every(200, () => send('flaky', { n: n++ }, { retryLimit: 0 }))
    report.queue = 'flaky'
    break
  }
  case 'bloat': {
    await createQueue('churn')
    await work('churn', 200, async () => { await sleep(400) })
    every(100, () => insert('churn', 10, (n += 10)))
    report.queue = 'churn'
    break
  }
  case 'saturated': {
    await createQueue('slow')
    await work('slow', 1, async () => { await sleep(400) })
    every(100, () => send('slow', { n: n++ }))
    report.queue = 'slow'
    break
  }
  case 'healthy': {
    // Its handler takes 400 ms a batch: the worker fetches again at once, always at work.
    await createQueue('steady')
    await work('steady', 10, async () => { await sleep(400) })
    every(200, () => send('steady', { n: n++ }))
    report.queue = 'steady'
    break
  }
  case 'polled-slowly': {
    // Jobs sent as a web application sends them, 10 at once (each on a pooled session) every
    // second; a worker that polls every 5 s (pg-boss's default is 2) and handles a batch at once.
    await createQueue('polled')
    await work('polled', 100, async () => {}, 5)
    every(1000, () => Promise.all(Array.from({ length: 10 }, () => send('polled', { n: n++ }))))
    report.queue = 'polled'
    break
  }
  default:
    console.error(`unknown cause ${cause}`)
    process.exit(2)
}
console.log(JSON.stringify(report))

process.stdin.resume()
process.stdin.on('end', async () => {
  running = false
  await boss.stop({ graceful: false, wait: false })
  process.exit(0)
})
