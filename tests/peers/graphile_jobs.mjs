// Graphile Worker driven through its own API for queuetop's job console tests
// (tests/test_jobs_graphile.py).
//   node graphile_jobs.mjs CONNECTION_STRING
// Migrates, says {"ready": true}, then runs the command on each line of standard input (JSON):
//   {"op": "add", "task", "payload", "spec"}   WorkerUtils.addJob -> {"added": id, "tag": payload.tag}
//   {"op": "reschedule", "ids", "runAt"}       WorkerUtils.rescheduleJobs (it sends no NOTIFY) -> {"rescheduled": [ids]}
//   {"op": "hold"}      a runner of task `hold` (concurrency 1): each of its jobs says {"holding": id}
//                       and runs until standard input closes (its job stays locked meanwhile)
//   {"op": "work", "pollInterval": ms}
//                       a runner of task `mail` (concurrency 1): each job says {"ran": id, "tag"}
//                       and throws when its payload says `fail`; the runner says {"listening": true}
//                       once it LISTENs, {"idle": true} each time its fetch finds nothing (it then
//                       waits pollInterval, unless a notification on `jobs:insert` nudges it), and
//                       {"notified": payload} for each notification it receives.
// Standard input closing ends it all (the held jobs complete).
import { createRequire } from 'node:module'
import { EventEmitter } from 'node:events'
import readline from 'node:readline'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const { makeWorkerUtils, run, Logger } = require('graphile-worker')
const [connectionString] = process.argv.slice(2)
const logger = new Logger(() => () => {})
const say = (what) => process.stdout.write(JSON.stringify(what) + '\n')

const utils = await makeWorkerUtils({ connectionString, logger })
await utils.migrate()
const runners = []
let release
const gate = new Promise((resolve) => { release = resolve })
say({ ready: true })

const lines = readline.createInterface({ input: process.stdin })
for await (const line of lines) {
  const cmd = JSON.parse(line)
  if (cmd.op === 'add') {
    const job = await utils.addJob(cmd.task, cmd.payload, { ...(cmd.spec || {}), ...(cmd.spec?.runAt ? { runAt: new Date(cmd.spec.runAt) } : {}) })
    say({ added: job.id, tag: cmd.payload?.tag ?? null })
  } else if (cmd.op === 'reschedule') {
    const jobs = await utils.rescheduleJobs(cmd.ids, { runAt: new Date(cmd.runAt) })
    say({ rescheduled: jobs.map((j) => j.id) })
  } else if (cmd.op === 'hold') {
    runners.push(await run({
      connectionString, concurrency: 1, pollInterval: 100, noHandleSignals: true, logger,
      taskList: { hold: async (payload, helpers) => { say({ holding: helpers.job.id }); await gate } },
    }))
    say({ started: 'hold' })
  } else if (cmd.op === 'work') {
    const events = new EventEmitter()
    events.on('pool:listen:success', () => say({ listening: true }))
    events.on('pool:listen:notification', ({ message }) => say({ notified: message.payload, channel: message.channel }))
    events.on('worker:getJob:empty', () => say({ idle: true }))
    runners.push(await run({
      connectionString, concurrency: 1, pollInterval: cmd.pollInterval, noHandleSignals: true, logger, events,
      taskList: {
        mail: async (payload, helpers) => {
          say({ ran: helpers.job.id, tag: payload.tag ?? null })
          if (payload.fail) throw new Error(`smtp said no to ${payload.tag}`)
        },
      },
    }))
    say({ started: 'work' })
  } else {
    say({ error: `unknown op ${cmd.op}` })
  }
}
release()
for (const runner of runners) await runner.stop()
await utils.release()
process.exit(0)
