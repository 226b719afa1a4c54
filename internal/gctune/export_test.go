package gctune

// CgroupLimit lets the external tests read a cgroup's limit.
var CgroupLimit = cgroupLimit
