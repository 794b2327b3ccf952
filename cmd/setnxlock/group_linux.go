package main

import (
	"bytes"
	"os"
	"strconv"
)

// onlyZombies reports whether every process of the group is a zombie, by
// each process's state and group in /proc. It answers false when /proc
// cannot be read: the lock is then held until the zombies are reaped.
func onlyZombies(group int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if state, pgrp, ok := parseStat(stat); ok && pgrp == group && state != 'Z' && state != 'X' {
			return false
		}
	}
	return true
}

// parseStat reads a process's state and process group from
// /proc/PID/stat: "pid (comm) state ppid pgrp ...", where comm may hold
// spaces and parentheses.
func parseStat(stat []byte) (state byte, pgrp int, ok bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(stat[i+1:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err := strconv.Atoi(string(fields[2]))
	return fields[0][0], pgrp, err == nil
}
