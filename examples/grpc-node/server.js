// The demo Greeter and Llm (../grpc/greeter.proto) on @grpc/grpc-js + polylimit: every call is decided by
// the shared rules file (its `greeter` rule: the full method names /polylimit.demo.Greeter/*).
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { Limiter } = require('polylimit');
const { polylimitInterceptor, reportCost } = require('polylimit/grpc');

const rules = process.env.POLYLIMIT_RULES || path.join(__dirname, '..', 'polylimit.yaml');
const definition = protoLoader.loadSync(path.join(__dirname, '..', 'grpc', 'greeter.proto'));
const { Greeter, Llm } = grpc.loadPackageDefinition(definition).polylimit.demo;

const limiter = Limiter.fromFile(rules);
// user: the `x-user` metadata stands in for your auth.
const interceptor = polylimitInterceptor({ limiter, user: (metadata) => metadata.get('x-user')[0] || null });
const server = new grpc.Server({ interceptors: [interceptor] });
server.addService(Greeter.service, {
  Hello: (call, callback) => callback(null, { value: `hello, ${call.request.value}` }),
  HelloStream: (call) => {
    for (let i = 0; i < 3; i++) call.write({ value: `hello, ${call.request.value} ${i}` });
    call.end();
  },
});
// An LLM-style call: the tokens the model used (here the x-actual-cost metadata) are its actual cost.
server.addService(Llm.service, {
  Generate: (call, callback) => {
    const actual = call.metadata.get('x-actual-cost')[0];
    if (actual !== undefined) reportCost(call, Number(actual));
    callback(null, { value: `generated, ${call.request.value}` });
  },
});

const port = Number(process.env.PORT || 50051);
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err) => {
  if (err) throw err;
  console.log(`grpc-node example on 127.0.0.1:${port}`);
});
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
