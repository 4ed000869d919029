"""The two Lua scripts behind the shared limits: CHECK (one round trip per request) and SETTLE (one more,
when the request ends). Redis runs a script alone, so no two replicas ever interleave inside one.

Per scope (the key's, the tenant's) five Redis keys, in this order:
  r   requests window: sorted set, member = reservation id, score = when taken (ms)
  t   tokens window: sorted set like r
  th  tokens by reservation: hash id → tokens, plus the field _sum (the window's total)
  c   concurrency leases: sorted set, member = reservation id, score = when the lease lapses (ms)
  b   the month's budget: a counter of tokens used (its name carries the month)
The server's clock (TIME) is the only clock, so replicas with skewed clocks still agree.

After the scopes' keys may come one more: the fair-share counters of the request's (service, band), a hash
of t:<tenant> and k:<key> counters, their requests charged and not settled n:t:<tenant> and n:k:<key>, the
band's virtual time _v and each tenant's keys' virtual time v:<tenant> (gateway/fairness.py does the same
arithmetic in memory). CHECK charges the request's estimated
cost there and answers its start tags; SETTLE corrects the counters with the cost used and moves the
virtual times up to the tags: fair share costs no round trip of its own.
"""

from __future__ import annotations

from gateway.order_lua import TOP

KEYS_PER_SCOPE = 5
SETTLE_KEYS_PER_SCOPE = 4  # t, th, c, b
REASONS = {0: None, 1: "requests", 2: "tokens", 3: "concurrency", 4: "budget"}

# ARGV: window ms, reservation id, tokens reserved, lease ms, budget ttl s, then per scope
# rpm, tpm, concurrency, budget (0 = none). Every limit of every scope is checked before any is taken.
# Returns {allowed, reason, retry ms, rpm limit, rpm remaining, rpm reset ms, tpm limit, tpm remaining,
# tpm reset ms, budget left per scope (-1 = none)...}; a limit of -1 means no such limit applies.
# With the counters' key: ARGV then ends with tenant, key, cost x SCALE, tenant weight, counters' ttl s, and the
# answer with the tenant tag and the key tag (0, 0 when refused). After the counters' key may come the band's
# waiting tenants and the tenant's waiting set (gateway/order_lua.py), and after the counters' ttl a wait in ms:
# the request, charged, then waits in its tenant's set until that deadline, its tenant among the waiting ones,
# and the answer ends with its member, the band's FIRSTS and the tenant's TOP (8 values).
CHECK = TOP + """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local window, id, cost = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local lease, budget_ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local scopes = math.floor(#KEYS / 5)
local fair = KEYS[scopes * 5 + 1]
local reason, retry = 0, 0
local req, tok = {-1, -1, 0}, {-1, -1, 0}
local left = {}

local function oldest_reset(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) + window - now end
  return window
end

local function tighter(out, limit, remaining, reset)
  if out[1] < 0 or remaining < out[2] then out[1] = limit; out[2] = remaining; out[3] = reset end
end

local function refuse(code, wait)
  if reason == 0 then reason = code; retry = wait end
end

for s = 1, scopes do
  local k, a = (s - 1) * 5, 5 + (s - 1) * 4
  local rpm, tpm = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local conc, budget = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  if rpm > 0 then
    local key = KEYS[k + 1]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    local used = redis.call('ZCARD', key)
    local reset = oldest_reset(key)
    if used >= rpm then refuse(1, reset) end
    tighter(req, rpm, rpm - used, reset)
  end
  if tpm > 0 then
    local key, sums = KEYS[k + 2], KEYS[k + 3]
    local gone = redis.call('ZRANGEBYSCORE', key, '-inf', now - window)
    local freed = 0
    for _, member in ipairs(gone) do
      freed = freed + tonumber(redis.call('HGET', sums, member) or 0)
      redis.call('HDEL', sums, member)
    end
    if #gone > 0 then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
      redis.call('HINCRBY', sums, '_sum', -freed)
    end
    local used = tonumber(redis.call('HGET', sums, '_sum') or 0)
    local reset = oldest_reset(key)
    if used + cost > tpm then
      -- Wait until enough of the window's oldest reservations have left it (a whole window when the
      -- request alone is larger than the limit: it can never fit).
      local wait = window
      if cost <= tpm then
        local need = used + cost - tpm
        local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
        for i = 1, #entries, 2 do
          need = need - tonumber(redis.call('HGET', sums, entries[i]) or 0)
          if need <= 0 then wait = tonumber(entries[i + 1]) + window - now; break end
        end
      end
      refuse(2, wait)
    end
    tighter(tok, tpm, tpm - used, reset)
  end
  if conc > 0 then
    local key = KEYS[k + 4]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    if redis.call('ZCARD', key) >= conc then refuse(3, 1000) end
  end
  left[s] = -1
  if budget > 0 then
    local used = tonumber(redis.call('GET', KEYS[k + 5]) or 0)
    if used + cost > budget then refuse(4, 0) end
    left[s] = budget - used
  end
end

if reason == 0 then
  for s = 1, scopes do
    local k, a = (s - 1) * 5, 5 + (s - 1) * 4
    if tonumber(ARGV[a + 1]) > 0 then
      redis.call('ZADD', KEYS[k + 1], now, id)
      redis.call('PEXPIRE', KEYS[k + 1], window)
    end
    if tonumber(ARGV[a + 2]) > 0 then
      redis.call('ZADD', KEYS[k + 2], now, id)
      redis.call('HSET', KEYS[k + 3], id, cost)
      redis.call('HINCRBY', KEYS[k + 3], '_sum', cost)
      redis.call('PEXPIRE', KEYS[k + 2], window)
      redis.call('PEXPIRE', KEYS[k + 3], window)
    end
    if tonumber(ARGV[a + 3]) > 0 then
      redis.call('ZADD', KEYS[k + 4], now + lease, id)
      redis.call('PEXPIRE', KEYS[k + 4], lease)
    end
    if tonumber(ARGV[a + 4]) > 0 then
      redis.call('INCRBY', KEYS[k + 5], cost)
      redis.call('EXPIRE', KEYS[k + 5], budget_ttl)
      left[s] = left[s] - cost
    end
  end
  -- What is left after this request (before it, when refused).
  if req[1] >= 0 then req[2] = req[2] - 1 end
  if tok[1] >= 0 then tok[2] = tok[2] - cost end
end
local tags = {0, 0}
if reason == 0 and fair then
  local a = 5 + scopes * 4
  local amount, weight = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  -- A flow with nothing charged and unsettled (n:<flow>) is idle: its counter is lifted to its virtual time
  -- (an idle flow banks no credit). A busy flow keeps its own counter, so a virtual time moved on by
  -- another replica's queue never resets it. The counter is the start tag, then advances by cost / weight.
  local function advance(field, floor, w)
    local start = tonumber(redis.call('HGET', fair, field) or 0)
    if redis.call('HINCRBY', fair, 'n:' .. field, 1) == 1 then start = math.max(start, floor) end
    redis.call('HSET', fair, field, start + math.floor(amount / w))
    return start
  end
  tags[1] = advance('t:' .. ARGV[a + 1], tonumber(redis.call('HGET', fair, '_v') or 0), weight)
  tags[2] = advance('k:' .. ARGV[a + 2], tonumber(redis.call('HGET', fair, 'v:' .. ARGV[a + 1]) or 0), 1)
  redis.call('EXPIRE', fair, tonumber(ARGV[a + 5]))
end
local place = {}
local q = KEYS[scopes * 5 + 2]
if reason == 0 and q then
  local a = 5 + scopes * 4
  local tenant, set, ttl = ARGV[a + 1], KEYS[scopes * 5 + 3], tonumber(ARGV[a + 5])
  local member = tenant .. ' ' .. ARGV[a + 2] .. ' ' .. (now + tonumber(ARGV[a + 6])) .. ' ' .. id
  -- A tenant that joins the band's waiting tenants is lifted to the least served counter waiting there (to the
  -- last served start when none waits): one that was not waiting banks no credit (gateway/order_lua.py).
  if not live(set, now) or not redis.call('ZSCORE', q, tenant) then
    local others = firsts(q, now)
    local floor = others[2] >= 0 and others[2] or tonumber(redis.call('HGET', fair, '_s') or 0)
    if others[1] == tenant then floor = others[4] >= 0 and others[4] or floor end
    local counter = math.max(tonumber(redis.call('HGET', fair, 's:' .. tenant) or 0), floor)
    redis.call('HSET', fair, 's:' .. tenant, counter)
    redis.call('ZADD', q, counter, tenant)
  end
  redis.call('ZADD', set, tags[2], member)
  redis.call('EXPIRE', q, ttl)
  redis.call('EXPIRE', set, ttl)
  place = {member}
  for _, value in ipairs(firsts(q, now)) do place[#place + 1] = value end
  for _, value in ipairs(top(set, 2, now)) do place[#place + 1] = value end
end
if req[2] < 0 then req[2] = 0 end
if tok[2] < 0 then tok[2] = 0 end
local out = {reason == 0 and 1 or 0, reason, retry, req[1], req[2], req[3], tok[1], tok[2], tok[3]}
for s = 1, scopes do out[#out + 1] = left[s] end
if fair then out[#out + 1] = tags[1]; out[#out + 1] = tags[2] end
for _, value in ipairs(place) do out[#out + 1] = value end
return out
"""

# KEYS: per scope t, th, c, b. ARGV: reservation id, tokens reserved, tokens used, then per scope
# has tpm, has concurrency, has budget (1/0). The window entry is corrected only while it is still in
# the window (a request longer than the window was counted once, at its reservation); the budget is
# always corrected, so a month's count is exact; the lease is released. With the fair-share counters' key
# last, ARGV ends with tenant, key, (cost used - cost estimated) x SCALE, tenant weight, tenant tag, key tag; with
# the band's waiting tenants after it (a request that waited in the shared order), its tenant's served counter is
# corrected too.
SETTLE = """
local id, reserved, used = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local scopes = math.floor(#KEYS / 4)
for s = 1, scopes do
  local k, a = (s - 1) * 4, 3 + (s - 1) * 3
  if ARGV[a + 1] == '1' and redis.call('ZSCORE', KEYS[k + 1], id) then
    local before = tonumber(redis.call('HGET', KEYS[k + 2], id) or reserved)
    redis.call('HSET', KEYS[k + 2], id, used)
    redis.call('HINCRBY', KEYS[k + 2], '_sum', used - before)
  end
  if ARGV[a + 2] == '1' then redis.call('ZREM', KEYS[k + 3], id) end
  if ARGV[a + 3] == '1' and redis.call('EXISTS', KEYS[k + 4]) == 1 then
    redis.call('INCRBY', KEYS[k + 4], used - reserved)
  end
end
local fair = KEYS[scopes * 4 + 1]
if fair then
  local a = 3 + scopes * 3
  local tenant, delta, weight = ARGV[a + 1], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  redis.call('HINCRBY', fair, 't:' .. tenant, math.floor(delta / weight))
  redis.call('HINCRBY', fair, 'k:' .. ARGV[a + 2], delta)
  for _, field in ipairs({'n:t:' .. tenant, 'n:k:' .. ARGV[a + 2]}) do
    if redis.call('HINCRBY', fair, field, -1) <= 0 then redis.call('HDEL', fair, field) end
  end
  -- The served counter too, for a request that waited in the shared order (its band's waiting tenants next).
  local q = KEYS[scopes * 4 + 2]
  if q and redis.call('HEXISTS', fair, 's:' .. tenant) == 1 then
    local counter = redis.call('HINCRBY', fair, 's:' .. tenant, math.floor(delta / weight))
    if redis.call('ZSCORE', q, tenant) then redis.call('ZADD', q, counter, tenant) end
  end
  local tenant_tag, key_tag = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  if tenant_tag > tonumber(redis.call('HGET', fair, '_v') or 0) then redis.call('HSET', fair, '_v', tenant_tag) end
  if key_tag > tonumber(redis.call('HGET', fair, 'v:' .. tenant) or 0) then
    redis.call('HSET', fair, 'v:' .. tenant, key_tag)
  end
end
return 1
"""
