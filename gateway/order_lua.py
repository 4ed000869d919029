"""The Redis side of the shared order (gateway/order.py): a band's waiting requests as seen by every replica.

Per (service, band), beside the fair-share counters' hash `<counters>`:
  <counters>:q           the tenants with a request waiting at any replica, score = the tenant's served counter
  <counters>:q:<tenant>  that tenant's waiting requests, score = their key tags
and in the hash, per tenant, its served counter `s:<tenant>` and the band's last served start `_s`. A member of a
tenant's set is "<tenant> <key> <deadline ms> <reservation id>". CHECK adds a request to its tenant's set when it
charges it (limits_lua.CHECK, the request's own round trip), and its tenant to `:q`; LOOK takes it out when its
replica lets it go on, sheds it or loses its client, and a tenant with nothing left waiting leaves `:q`.

The served counter is VTC's own: it advances by the cost (over the tenant's weight) of each request of the tenant
that goes on, at whichever replica, in the same script that decides it may go (a claim: the order is decided and
charged at once, so no two replicas go on one tenant's turn); SETTLE corrects it by the engine's usage. A tenant
that joins `:q` is lifted to the least counter waiting there (to `_s` when none waits): a tenant that was not
waiting banks no credit. The tenant whose served counter is least goes first, so the cost served to each tenant,
not the cost charged at admission to the requests holding its places, is what the order evens out. (The tags
CHECK answers still order a replica's own queue; across replicas they would not: a request that goes on at one
replica is not the one charged first, which waits at another, and the two costs differ.)

A member past its deadline (its replica gone without a word) is dropped by whichever script next reads it, and a
tenant with no member left leaves `:q` then.
"""

from __future__ import annotations

SCAN = 64

# TOP(set, field, now): {flow, tag, flow, tag}, '' and -1 where there is none; field 2 reads the key of a tenant's
# set. FIRSTS(q, now): the same for the two least tenants of `:q` by served counter, each with a live member.
TOP = f"""
local function top(set, field, now)
  local entries = redis.call('ZRANGE', set, 0, {SCAN - 1}, 'WITHSCORES')
  local out, gone = {{'', -1, '', -1}}, {{}}
  local found = 0
  for i = 1, #entries, 2 do
    local tenant, key, deadline = string.match(entries[i], '^(%S+) (%S+) (%d+) ')
    if tonumber(deadline) < now then
      gone[#gone + 1] = entries[i]
    else
      local flow = field == 1 and tenant or key
      if found == 0 then
        out[1] = flow; out[2] = tonumber(entries[i + 1]); found = 1
      elseif flow ~= out[1] then
        out[3] = flow; out[4] = tonumber(entries[i + 1]); found = 2
        break
      end
    end
  end
  if found == 1 and #entries == {2 * SCAN} then out[4] = tonumber(entries[#entries]) end
  if #gone > 0 then redis.call('ZREM', set, unpack(gone)) end
  return out
end
local function live(set, now)
  while true do
    local first = redis.call('ZRANGE', set, 0, 0)
    if #first == 0 then return false end
    if tonumber(string.match(first[1], '^%S+ %S+ (%d+) ')) >= now then return true end
    redis.call('ZREM', set, first[1])
  end
end
local function firsts(q, now)
  local out, found = {{'', -1, '', -1}}, 0
  local entries = redis.call('ZRANGE', q, 0, {SCAN - 1}, 'WITHSCORES')
  for i = 1, #entries, 2 do
    if live(q .. ':' .. entries[i], now) then
      out[2 * found + 1] = entries[i]; out[2 * found + 2] = tonumber(entries[i + 1]); found = found + 1
      if found == 2 then break end
    else
      redis.call('ZREM', q, entries[i])
    end
  end
  return out
end
-- A tenant's request went on (and was still in its set, `left`): its served counter advances by `amount` (its
-- cost over the tenant's weight), once.
local function served(hash, q, tenant, amount)
  local start = tonumber(redis.call('HGET', hash, 's:' .. tenant) or 0)
  redis.call('HSET', hash, 's:' .. tenant, start + amount, '_s', start)
  if redis.call('ZSCORE', q, tenant) then redis.call('ZADD', q, start + amount, tenant) end
end
-- A member left its tenant's set: the tenant leaves `:q` when nothing of it is left waiting.
local function left(q, set, tenant, member)
  local removed = redis.call('ZREM', set, member)
  if redis.call('ZCARD', set) == 0 then redis.call('ZREM', q, tenant) end
  return removed
end
"""

# Seats: per service a counter `<prefix>seats:<service>` of seats lent by replicas that hold their heads back (a
# replica's share of the service's bound it leaves free while another replica's flow goes first), for a replica
# whose head may go but has no seat of its own.
# KEYS: per forget its band's hash, `:q` and its tenant's set; per move the service's seats; per look the same
# three and its service's seats. ARGV: the channel told what moved, how many forgets and moves, each forget's
# member, whether it went on (1: let go without a claim, its tenant's counter advances) or was dropped (0) and
# its amount, each move's change (> 0: seats lent or given back), and per look its head's tenant, key, key tag,
# member and amount, whether it would borrow a seat (1/0), how many seats its replica has lent to take back, how
# many free seats it lends if the head may not go, and whether its replica has a free seat for it (1/0). Answers
# per look the band's FIRSTS and the tenant's TOP (after any claim), whether the head may go (1/0), seats
# borrowed (0/1), seats taken back, seats lent, and whether the head was claimed (1/0): it may go and has a seat
# (its replica's, borrowed or taken back), so it is out of the order and its tenant's counter has advanced (once:
# a member no longer in its set is charged nothing); its replica lets it go on. A seat moves only to a head that
# may go, and a replica whose head may not go lends its free seats in the same round trip.
LOOK = TOP + """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local forgets, moves = tonumber(ARGV[2]), tonumber(ARGV[3])
local moved = {}
local function tell(name)
  if not moved[name] then
    moved[name] = true
    redis.call('PUBLISH', ARGV[1], name)
  end
end
for i = 1, forgets do
  local k, a = 3 * i - 3, 3 * i + 1
  local member = ARGV[a]
  local tenant = string.match(member, '^(%S+) ')
  if left(KEYS[k + 2], KEYS[k + 3], tenant, member) > 0 then
    if ARGV[a + 1] == '1' then served(KEYS[k + 1], KEYS[k + 2], tenant, tonumber(ARGV[a + 2])) end
    tell(KEYS[k + 2])
  end
end
for i = 1, moves do
  local seats, change = KEYS[3 * forgets + i], tonumber(ARGV[3 + 3 * forgets + i])
  if redis.call('INCRBY', seats, change) < 0 then redis.call('SET', seats, 0) end
  if change > 0 then tell(seats) end
end

local function least_other(view, first, me)
  if view[first + 1] < 0 then return nil end
  if view[first] ~= me then return view[first + 1] end
  if view[first + 3] < 0 then return nil end
  return view[first + 3]
end
local out = {}
local k, a = 3 * forgets + moves, 3 + 3 * forgets + moves
while k < #KEYS do
  local hash, q, set, seats = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local me, key, key_tag, member, amount = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), ARGV[a + 4],
    tonumber(ARGV[a + 5])
  local band, tenant = firsts(q, now), top(set, 2, now)
  -- Between tenants, the tenant's served counter against the others'; within it, the head's key tag.
  local first = band[2] < 0 or band[1] == me or (band[3] == me and band[4] <= band[2])
  local key_least = least_other(tenant, 1, key)
  local go = first and (key_least == nil or key_tag <= key_least)
  local borrowed, taken, lent, claimed = 0, 0, 0, 0
  if not go and tonumber(ARGV[a + 8]) > 0 then
    lent = tonumber(ARGV[a + 8])
    redis.call('INCRBY', seats, lent)
    tell(seats)
  end
  if go then
    local free = tonumber(redis.call('GET', seats) or 0)
    local reclaim = tonumber(ARGV[a + 7])
    if reclaim > 0 then
      taken = math.min(free, reclaim)
    elseif ARGV[a + 6] == '1' and free > 0 then
      borrowed = 1
    end
    if taken + borrowed > 0 then redis.call('DECRBY', seats, taken + borrowed) end
    if ARGV[a + 9] == '1' or taken + borrowed > 0 then
      claimed = 1
      if left(q, set, me, member) > 0 then served(hash, q, me, amount) end
      tell(q)
      band, tenant = firsts(q, now), top(set, 2, now)
    end
  end
  for _, value in ipairs(band) do out[#out + 1] = value end
  for _, value in ipairs(tenant) do out[#out + 1] = value end
  out[#out + 1] = go and 1 or 0
  out[#out + 1] = borrowed
  out[#out + 1] = taken
  out[#out + 1] = lent
  out[#out + 1] = claimed
  k, a = k + 4, a + 9
end
return out
"""
