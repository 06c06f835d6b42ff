--[[
coscheduler's Slurm submit hook (JobSubmitPlugins=lua; this file goes next to slurm.conf).

Users opt a job in by submitting it to the co-scheduling partition, optionally describing it
in --comment (docs/slurm.md, slurm_plugin/metadata.py):

    sbatch -p cosched -t 10 -c 4 --comment "cosched:class=montage/mProject,type=parallel,tasks=198" job.sh

For such a job this hook
  * refuses malformed metadata, a missing time limit (ASA_X measures a host's loss against
    it), job arrays, and partition lists that mix the co-scheduling partition with others,
    with a message the user sees on sbatch's stderr;
  * holds the job (priority 0) so only the coscheduler controller starts it, marks it
    shareable (--oversubscribe: a host must be shareable for a guest to join it) and not
    requeueable (a stage runs once per job id, so its outcome can be learned);
  * never raises a priority or touches limits: the partition's own limits still apply.
Jobs in other partitions are untouched, except that co-scheduling metadata is refused there.

On modification, a non-admin may not release or hold a co-scheduled job (the controller
does), change its metadata, or move a job into or out of the partition: a job opts in at
submission, by its owner, and nobody can opt another user's job in.

Jobs for Mesos (docs/mesos.md, "From Slurm"): a job submitted to the Mesos partition
(MESOS_PARTITION; empty: none) is checked the same way, held for good (Slurm never runs
it), and marked in its AdminComment ("cosched:v=1;run=mesos;state=queued"), which users
cannot write. The coscheduler Mesos framework (`cosched run --backend mesos --from-slurm`)
runs it as Mesos tasks and records how it went in the AdminComment.

Site settings: `cosched slurm up` fills in these lines; a site edits them by hand.
Tested against Slurm 22.05 (Lua 5.1); written for Lua 5.1-5.4.
--]]
local COSCHED_PARTITION = "cosched"
local MESOS_PARTITION = ""
local ADMIN_UIDS = { [0] = true }

local NO_VAL = 4294967294
local INFINITE = 4294967295
local PREFIX = "cosched:"
local MAX_COMMENT = 1024
local KEYS = { class = true, type = true, tasks = true, workflow = true, stage = true, walltime = true }
local KEY_LIST = "class, type, tasks, workflow, stage, walltime"

-- sbatch shows the user this message; scontrol (job_modify) only says "Unspecified
-- error" in 22.05, so the reason also goes to slurmctld's log for the admin and the user.
local function reject(msg)
   -- The message quotes what the user typed (a comment, a partition list): its control
   -- characters are shown as \NNN, so that a newline cannot start a forged log line.
   msg = msg:gsub("%c", function(c) return string.format("\\%03d", c:byte()) end)
   slurm.log_user("cosched: %s", msg)
   slurm.log_info("cosched: refused: %s", msg)
   return slurm.ERROR
end

-- Is the job (by its partition list) in partition `ours`: "only", "mixed" or nil.
local function membership_in(ours, partition, part_list)
   if ours == nil or ours == "" then return nil end
   if partition == nil then
      -- No -p: the default partition, if it is ours.
      if part_list ~= nil then
         for name, part in pairs(part_list) do
            if part.flag_default == 1 and (part.name == ours or name == ours) then
               return "only"
            end
         end
      end
      return nil
   end
   local found, others = false, false
   for p in string.gmatch(partition, "[^,]+") do
      if p == ours then found = true else others = true end
   end
   if found and others then return "mixed" end
   if found then return "only" end
   return nil
end

local function cosched_membership(partition, part_list)
   return membership_in(COSCHED_PARTITION, partition, part_list)
end

local function mesos_membership(partition, part_list)
   return membership_in(MESOS_PARTITION, partition, part_list)
end

-- In either of our partitions (co-scheduling or Mesos)?
local function ours(partition, part_list)
   return cosched_membership(partition, part_list) ~= nil or mesos_membership(partition, part_list) ~= nil
end

local function valid_name(v, maxlen)
   return #v >= 1 and #v <= maxlen and string.match(v, "^[%w][%w_%.:%+%-]*$") ~= nil
end

local function valid_class(v)
   if #v < 1 or #v > 128 or string.match(v, "^[%w][%w_%.:/%+%-]*$") == nil then return false end
   return string.find("/" .. v .. "/", "/%.%./") == nil
end

local function positive_int(v)
   return string.match(v, "^%d+$") ~= nil and #v <= 9 and tonumber(v) >= 1
end

-- nil when the metadata is well formed, else the reason (same rules as metadata.py).
local function metadata_problem(comment, time_limit)
   if #comment > MAX_COMMENT then
      return "metadata is longer than " .. MAX_COMMENT .. " characters"
   end
   local body = string.sub(comment, #PREFIX + 1)
   if body == "" then
      return "metadata is empty: write cosched:key=value,... with keys " .. KEY_LIST
   end
   local seen = {}
   for item in string.gmatch(body .. ",", "([^,]*),") do
      local key, value = string.match(item, "^([^=]+)=(.*)$")
      if key == nil then return "metadata item '" .. item .. "' is not key=value" end
      if not KEYS[key] then return "metadata key '" .. key .. "' is unknown; valid keys: " .. KEY_LIST end
      if seen[key] then return "metadata key '" .. key .. "' is given twice" end
      seen[key] = value
   end
   if seen.class and not valid_class(seen.class) then
      return "metadata class '" .. seen.class .. "' is not valid: use 1-128 letters, digits or '_.:/+-', starting with a letter or digit"
   end
   if seen.type and seen.type ~= "sequential" and seen.type ~= "parallel" then
      return "metadata type must be sequential or parallel, got '" .. seen.type .. "'"
   end
   if seen.tasks and not positive_int(seen.tasks) then
      return "metadata tasks must be an integer >= 1, got '" .. seen.tasks .. "'"
   end
   for _, key in ipairs({ "workflow", "stage" }) do
      if seen[key] and not valid_name(seen[key], 64) then
         return "metadata " .. key .. " '" .. seen[key] .. "' is not valid: use 1-64 letters, digits or '_.:+-', starting with a letter or digit"
      end
   end
   if seen.walltime then
      if not positive_int(seen.walltime) then
         return "metadata walltime must be whole seconds >= 1, got '" .. seen.walltime .. "'"
      end
      if time_limit ~= nil and time_limit ~= NO_VAL and time_limit ~= INFINITE
         and tonumber(seen.walltime) > time_limit * 60 then
         return "metadata walltime " .. seen.walltime .. " s is longer than the job's time limit (" .. (time_limit * 60) .. " s)"
      end
   end
   return nil
end

local function has_prefix(s)
   return s ~= nil and string.sub(s, 1, #PREFIX) == PREFIX
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local member = cosched_membership(job_desc.partition, part_list)
   local where = COSCHED_PARTITION
   local mesos = mesos_membership(job_desc.partition, part_list)
   if member ~= nil and mesos ~= nil then
      return reject("partitions " .. COSCHED_PARTITION .. " and " .. MESOS_PARTITION ..
         " cannot be combined: submit to one of them")
   end
   if mesos ~= nil then member, where = mesos, MESOS_PARTITION end
   if member == nil then
      if has_prefix(job_desc.comment) then
         return reject("co-scheduling metadata is only read in partition " .. COSCHED_PARTITION ..
            ": add -p " .. COSCHED_PARTITION .. " to opt in, or drop the cosched: comment")
      end
      return slurm.SUCCESS
   end
   if member == "mixed" then
      return reject("partition " .. where .. " cannot be combined with other partitions (got " ..
         job_desc.partition .. "): submit to -p " .. where .. " alone")
   end
   -- (0 asks for no limit, as INFINITE does: slurm_plugin/parse.py reads it so)
   if job_desc.time_limit == nil or job_desc.time_limit == NO_VAL or job_desc.time_limit == INFINITE
         or job_desc.time_limit == 0 then
      return reject("jobs in partition " .. where ..
         " need a time limit (--time): co-scheduling measures a host's slowdown against it")
   end
   if job_desc.array_inx ~= nil and job_desc.array_inx ~= "" then
      return reject("job arrays cannot be co-scheduled; submit one job per stage")
   end
   if has_prefix(job_desc.comment) then
      local problem = metadata_problem(job_desc.comment, job_desc.time_limit)
      if problem ~= nil then return reject(problem) end
   end
   job_desc.priority = 0   -- held: the coscheduler controller releases it
   job_desc.requeue = 0    -- one run per job id: its outcome is what ASA_X learns from
   if mesos ~= nil then
      -- Held for good: the Mesos framework runs it and records its end here.
      job_desc.admin_comment = "cosched:v=1;run=mesos;state=queued"
      slurm.log_info("cosched: job from uid %u held for the coscheduler Mesos framework", submit_uid)
      return slurm.SUCCESS
   end
   job_desc.shared = 1     -- --oversubscribe: guests may share a host's cores
   slurm.log_info("cosched: job from uid %u held for the coscheduler controller", submit_uid)
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if ADMIN_UIDS[modify_uid] then
      return slurm.SUCCESS   -- the controller (and operators) manage co-scheduled jobs
   end
   local was_in = job_rec ~= nil and ours(job_rec.partition, nil)
   local goes_in = job_desc.partition ~= nil and ours(job_desc.partition, nil)
   if goes_in and not was_in then
      return reject("a job opts in to co-scheduling when it is submitted (sbatch -p " ..
         COSCHED_PARTITION .. (MESOS_PARTITION ~= "" and (" or -p " .. MESOS_PARTITION) or "") ..
         "), not later")
   end
   if has_prefix(job_desc.comment) and not was_in then
      return reject("co-scheduling metadata is only read in partition " .. COSCHED_PARTITION)
   end
   if not was_in then
      return slurm.SUCCESS
   end
   if job_desc.partition ~= nil then
      return reject("a co-scheduled job cannot change partition; cancel it and submit again")
   end
   if job_desc.comment ~= nil then
      return reject("a co-scheduled job's metadata (--comment) is fixed at submission")
   end
   if job_desc.priority ~= nil and job_desc.priority ~= NO_VAL then
      return reject("co-scheduled jobs are held and released by the coscheduler controller, not by hand")
   end
   return slurm.SUCCESS
end

return slurm.SUCCESS
