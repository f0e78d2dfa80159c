# Sourced by the bench scripts of this directory. A preloaded library (pg_stat_statements with
# track = all, auto_explain) slows every statement, and fsync or synchronous_commit off speeds up
# every commit: figures taken with one are not comparable with figures taken without
# (docs/benchmarks.md, "A check on this VM"). Each script prints them before its figures.
#   bench_server_settings psql [options...]    (the psql command that reaches the cluster)
bench_server_settings() {
  echo "server: $("$@" -d postgres -At -c "SELECT 'shared_preload_libraries = ''' ||
    current_setting('shared_preload_libraries') || ''', fsync = ' || current_setting('fsync') ||
    ', synchronous_commit = ' || current_setting('synchronous_commit')")"
}
