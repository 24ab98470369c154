// A pg-boss workload made through pg-boss's own API, for queuetop's tests.
//   node pgboss_workload.mjs CONNECTION_STRING 10|9
// Queue "mail": 4 completed, 1 failed for good, 1 failed and retrying after a 10-minute back-off,
// 2 scheduled an hour ahead, 3 ready. Queue "reports": a worker runs one job (active) until
// standard input closes; a second job waits (ready). Prints {"ready": true} once all is in place.
import { createRequire } from 'node:module'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const [connectionString, major] = process.argv.slice(2)
const PgBoss = require(major === '9' ? 'pg-boss-9' : 'pg-boss')
const v10 = major !== '9'

const boss = new PgBoss({ connectionString, max: 4, supervise: false, schedule: false, ...(v10 ? {} : { noSupervisor: true, noScheduling: true }) })
boss.on('error', (error) => console.error(error))
await boss.start()

const fetchOne = async (name) => {
  const got = await boss.fetch(name)
  return Array.isArray(got) ? got[0] : got
}
const complete = (name, id) => (v10 ? boss.complete(name, id) : boss.complete(id))
const fail = (name, id, data) => (v10 ? boss.fail(name, id, data) : boss.fail(id, data))

if (v10) {
  await boss.createQueue('mail')
  await boss.createQueue('reports')
}
// Each finishing job is sent and fetched on its own, so the fetch takes exactly that one.
await boss.send('mail', { to: 'retry@example.com' }, { retryLimit: 3, retryDelay: 600 })
let job = await fetchOne('mail')
await fail('mail', job.id, { message: 'smtp timeout' })
await boss.send('mail', { to: 'bounce@example.com' }, { retryLimit: 0 })
job = await fetchOne('mail')
await fail('mail', job.id, { message: 'mailbox full' })
for (let n = 0; n < 4; n++) {
  await boss.send('mail', { to: `done${n}@example.com` })
  job = await fetchOne('mail')
  await complete('mail', job.id)
}
for (let n = 0; n < 2; n++) await boss.send('mail', { to: `later${n}@example.com` }, { startAfter: 3600 })
for (let n = 0; n < 3; n++) await boss.send('mail', { to: `now${n}@example.com` })

let release
const gate = new Promise((resolve) => { release = resolve })
await boss.send('reports', { report: 1 })
await boss.send('reports', { report: 2 })
const running = new Promise((resolve) => {
  const handler = async (arg) => { resolve(); await gate }
  if (v10) boss.work('reports', { batchSize: 1, pollingIntervalSeconds: 0.5 }, handler)
  else boss.work('reports', { teamSize: 1, teamConcurrency: 1, newJobCheckInterval: 500 }, handler)
})
await running
console.log(JSON.stringify({ ready: true }))

process.stdin.resume()
process.stdin.on('end', async () => {
  release()
  await boss.stop({ graceful: false, wait: false })
  process.exit(0)
})
