"""The Redis side of the shared order (gateway/order.py): a band's waiting requests as seen by every replica.

Per (service, band), beside the fair-share counters' hash `<counters>`, two sorted sets:
  <counters>:w           every charged request waiting at any replica, score = its tenant tag
  <counters>:w:<tenant>  the same tenant's, score = its key tag
A member is "<tenant> <key> <deadline ms> <reservation id>". CHECK adds a request to both when it charges it
(limits_lua.CHECK, the request's own round trip); LOOK takes it out when its replica lets it go on, sheds it or
loses its client, riding on the next pipeline of settles. A tenant's tags in `:w` are its places in line: a
request that goes on takes its tenant's least (the tag it carries, as in the door's own queue, gateway/fairness.py)
and hands its own score to the member that held that one; a request shed or lost gives up its tenant's greatest.
So a tenant's least waiting tag moves on with every request of it served, at whichever replica. A member past its
deadline (its replica gone without a word) is dropped by whichever script next reads the set.

What a replica reads (TOP): the two least flows of a set, each with its least waiting tag: the first two
distinct tenants of `:w`, the first two distinct keys of `:w:<tenant>`. A flow's least other is then the
other one. At most SCAN members are read: when they are all one flow's, the last one read stands for "every
other flow is at least here", a bound that only makes a replica wait longer, never serve out of turn.
"""

from __future__ import annotations

SCAN = 64

# TOP(set, field, now): {flow, tag, flow, tag}, '' and -1 where there is none; field 1 reads the tenant, 2 the key.
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
"""

# Seats: per service a counter `<prefix>seats:<service>` of seats lent by replicas that hold their heads back (a
# replica's share of the service's bound it leaves free while another replica's flow goes first), for a replica
# whose head may go but has no seat of its own.
# KEYS: per forget its band's and its tenant's sets; per move the service's seats; per look its band's and its
# tenant's sets and its service's seats. ARGV: the channel told what moved, how many forgets and moves, each
# forget's member and whether it went on (1) or was dropped (0), each move's change (> 0: seats lent or given
# back), and per look its head's tenant, key, tenant tag, key tag, whether it would borrow a seat (1/0), how many
# seats its replica has lent to take back, and how many free seats it lends if the head may not go. Answers per
# look the band's TOP, the tenant's TOP, whether the head may go (1/0), seats borrowed (0/1), seats taken back
# and seats lent: a seat moves only to a head that may go, and a replica whose head may not go lends its free seats
# in the same round trip.
LOOK = TOP + f"local SCAN = {SCAN}\n" + """
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
-- A tenant's tags in the band are its places in line, whichever of its requests holds them. A request that went
-- on takes its tenant's least (the tag it carries, as in the door's own queue) and leaves its own to the request
-- that held that one; a request dropped gives up its tenant's greatest. Searched among SCAN members.
local function pass_on(band, member, score, went)
  local tenant = string.match(member, '^(%S+) ')
  local range
  if went then
    range = redis.call('ZRANGEBYSCORE', band, '-inf', '(' .. score, 'LIMIT', 0, SCAN)
  else
    range = redis.call('ZREVRANGEBYSCORE', band, '+inf', '(' .. score, 'LIMIT', 0, SCAN)
  end
  for _, other in ipairs(range) do
    local flow, deadline = string.match(other, '^(%S+) %S+ (%d+) ')
    if flow == tenant and tonumber(deadline) >= now then
      redis.call('ZADD', band, score, other)
      return
    end
  end
end
for i = 1, forgets do
  local band, member, went = KEYS[2 * i - 1], ARGV[2 + 2 * i], ARGV[3 + 2 * i] == '1'
  redis.call('ZREM', KEYS[2 * i], member)
  local score = redis.call('ZSCORE', band, member)
  if score then
    redis.call('ZREM', band, member)
    pass_on(band, member, score, went)
    tell(band)
  end
end
for i = 1, moves do
  local seats, change = KEYS[2 * forgets + i], tonumber(ARGV[3 + 2 * forgets + i])
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
local k, a = 2 * forgets + moves, 3 + 2 * forgets + moves
while k < #KEYS do
  local band, tenant = top(KEYS[k + 1], 1, now), top(KEYS[k + 2], 2, now)
  -- Between tenants, the tenant's least waiting tag against the others'; within it, the head's key tag.
  local me = ARGV[a + 1]
  local first = band[2] < 0 or band[1] == me or (band[3] == me and band[4] <= band[2])
  local key_least = least_other(tenant, 1, ARGV[a + 2])
  local go = first and (key_least == nil or tonumber(ARGV[a + 4]) <= key_least)
  local borrowed, taken, lent = 0, 0, 0
  if not go and tonumber(ARGV[a + 7]) > 0 then
    lent = tonumber(ARGV[a + 7])
    redis.call('INCRBY', KEYS[k + 3], lent)
    tell(KEYS[k + 3])
  end
  if go then
    local free = tonumber(redis.call('GET', KEYS[k + 3]) or 0)
    local reclaim = tonumber(ARGV[a + 6])
    if reclaim > 0 then
      taken = math.min(free, reclaim)
    elseif ARGV[a + 5] == '1' and free > 0 then
      borrowed = 1
    end
    if taken + borrowed > 0 then redis.call('DECRBY', KEYS[k + 3], taken + borrowed) end
  end
  for _, value in ipairs(band) do out[#out + 1] = value end
  for _, value in ipairs(tenant) do out[#out + 1] = value end
  out[#out + 1] = go and 1 or 0
  out[#out + 1] = borrowed
  out[#out + 1] = taken
  out[#out + 1] = lent
  k, a = k + 3, a + 7
end
return out
"""
