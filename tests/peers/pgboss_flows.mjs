// pg-boss traffic in phases, through its own API, for queuetop's rate tests.
//   node pgboss_flows.mjs CONNECTION_STRING 10|9
// Starts pg-boss (its schema), says {"ready": true}, then for each line read on standard input
// runs one phase and says {"done": "<phase>"} once its jobs are all worked off:
//   mail     300 jobs to "mail", every tenth failing for good (retryLimit 0), worked by fetch and
//            complete/fail, 25 at a time (as a worker's batch)
//   reports  200 jobs to "reports", all completed
// Standard input closing ends it.
import { createRequire } from 'node:module'
import readline from 'node:readline'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const [connectionString, major] = process.argv.slice(2)
const PgBoss = require(major === '9' ? 'pg-boss-9' : 'pg-boss')
const v10 = major !== '9'

const boss = new PgBoss({ connectionString, max: 4, supervise: false, schedule: false, ...(v10 ? {} : { noSupervisor: true, noScheduling: true }) })
boss.on('error', (error) => console.error(error))
await boss.start()
if (v10) {
  await boss.createQueue('mail')
  await boss.createQueue('reports')
}
const fetchSome = async (name, n) => {
  const got = await (v10 ? boss.fetch(name, { batchSize: n }) : boss.fetch(name, n))
  return got ? (Array.isArray(got) ? got : [got]) : []
}
const complete = (name, ids) => (v10 ? boss.complete(name, ids) : boss.complete(ids))
const fail = (name, ids, data) => (v10 ? boss.fail(name, ids, data) : boss.fail(ids, data))
console.log(JSON.stringify({ ready: true }))

const lines = readline.createInterface({ input: process.stdin })
for await (const phase of lines) {
  const count = phase === 'mail' ? 300 : 200
  for (let n = 1; n <= count; n++) await boss.send(phase, { n }, { retryLimit: 0 })
  for (let jobs = await fetchSome(phase, 25); jobs.length; jobs = await fetchSome(phase, 25)) {
    const failing = jobs.filter((j) => phase === 'mail' && j.data.n % 10 === 0).map((j) => j.id)
    const done = jobs.filter((j) => !failing.includes(j.id)).map((j) => j.id)
    if (failing.length) await fail(phase, failing, { message: 'mailbox full' })
    if (done.length) await complete(phase, done)
  }
  console.log(JSON.stringify({ done: phase }))
}
await boss.stop({ graceful: false, wait: true })
process.exit(0)
