// A Graphile Worker workload made through Graphile Worker's own API, for queuetop's tests.
//   node graphile_workload.mjs CONNECTION_STRING
// Task send_email: one job failed for good (max 1 attempt), one failed once and backing off
// (rescheduled 10 minutes ahead, as its back-off would), 2 scheduled an hour ahead, 3 ready.
// Task build_report in the named queue "reports": a worker runs one (the queue is locked), a
// second waits behind it. Prints {"ready": true, ...}; standard input closing ends it all.
import { createRequire } from 'node:module'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const { makeWorkerUtils, runOnce, run } = require('graphile-worker')
const [connectionString] = process.argv.slice(2)
const logFactory = () => () => {}
const { Logger } = require('graphile-worker')
const logger = new Logger(logFactory)

const utils = await makeWorkerUtils({ connectionString, logger })
await utils.migrate()

const sendEmail = async (payload) => {
  if (payload.fail) throw new Error(`smtp said no to ${payload.to}`)
}
// Two jobs that fail once, in one pass of a worker.
const bounce = await utils.addJob('send_email', { to: 'bounce@example.com', fail: true }, { maxAttempts: 1 })
const flaky = await utils.addJob('send_email', { to: 'flaky@example.com', fail: true }, { maxAttempts: 5 })
await runOnce({ connectionString, taskList: { send_email: sendEmail }, logger })
// Its exponential back-off after one failure is seconds; hold it ten minutes to look at it.
await utils.rescheduleJobs([flaky.id], { runAt: new Date(Date.now() + 600_000) })
for (let n = 0; n < 2; n++) await utils.addJob('send_email', { to: `later${n}@example.com` }, { runAt: new Date(Date.now() + 3_600_000) })
for (let n = 0; n < 3; n++) await utils.addJob('send_email', { to: `now${n}@example.com` })

let release
const gate = new Promise((resolve) => { release = resolve })
let started
const running = new Promise((resolve) => { started = resolve })
await utils.addJob('build_report', { report: 1 }, { queueName: 'reports' })
await utils.addJob('build_report', { report: 2 }, { queueName: 'reports' })
const runner = await run({
  connectionString, concurrency: 1, pollInterval: 200, noHandleSignals: true, logger,
  taskList: { build_report: async () => { started(); await gate } },
})
await running
console.log(JSON.stringify({ ready: true, bounce: bounce.id, flaky: flaky.id }))

process.stdin.resume()
process.stdin.on('end', async () => {
  release()
  await runner.stop()
  await utils.release()
  process.exit(0)
})
