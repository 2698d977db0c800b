#!/usr/bin/env bash
# Least privilege on RabbitMQ (docs/how-to/secure-the-broker.md): a user for the training
# nodes' collectors that may only publish to the ingest exchange, and one for ETT's web,
# worker and beat. Run it where rabbitmqctl reaches the node; it is idempotent (a second run
# sets both passwords and permissions again, so it also rotates a password).
#
#   deploy/rabbitmq/ett-broker-users.sh [--vhost ett] [--queue celery] \
#       [--node-user ett-node] [--worker-user ett-worker] NODE_PASSWORD_FILE WORKER_PASSWORD_FILE
#
# Each password is the first line of its file, handed to rabbitmqctl on its standard input,
# never on a command line. RABBITMQCTL names the command (default: rabbitmqctl), e.g.
# RABBITMQCTL="docker compose exec -T rabbitmq rabbitmqctl".
#
# The node user (configure, write, read on the vhost):
#   configure  nothing     it declares nothing: no queue, exchange or binding of its own
#   write      ^QUEUE$     publish to the exchange Celery names after the ingest queue, and
#                          nowhere else: not the nameless default exchange, which reaches every
#                          queue by name, nor the workers' control exchanges
#   read       nothing     no consuming, no basic.get, no purge
# The worker user may do anything in the vhost, and nothing elsewhere: workers declare their
# queues and exchanges (the ingest queue among them, bound to its exchange), consume them,
# publish follow-up tasks and answer remote control. The web service and beat use it too.
set -euo pipefail

vhost=ett
queue=celery
node_user=ett-node
worker_user=ett-worker
usage="usage: $0 [--vhost NAME] [--queue NAME] [--node-user NAME] [--worker-user NAME] NODE_PASSWORD_FILE WORKER_PASSWORD_FILE"

fail() {
    echo "ett-broker-users: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --vhost|--queue|--node-user|--worker-user)
            [ $# -ge 2 ] && [ -n "$2" ] || fail "$1 needs a value"
            case "$1" in
                --vhost) vhost=$2 ;;
                --queue) queue=$2 ;;
                --node-user) node_user=$2 ;;
                --worker-user) worker_user=$2 ;;
            esac
            shift 2 ;;
        -h|--help) echo "$usage"; exit 0 ;;
        --) shift; break ;;
        -*) fail "unknown option $1; $usage" ;;
        *) break ;;
    esac
done
[ $# -eq 2 ] || fail "$usage"
node_password_file=$1
worker_password_file=$2
[ "$node_user" != "$worker_user" ] || fail "--node-user and --worker-user must differ"

# A blank password is no password to rabbitmqctl: it turns password log-in off for the user.
for file in "$node_password_file" "$worker_password_file"; do
    [ -r "$file" ] || fail "cannot read password file $file"
    first=$(head -n 1 "$file")
    [ -n "${first//[[:space:]]/}" ] || fail "password file $file is empty (the password is its first line)"
done

read -r -a ctl <<< "${RABBITMQCTL:-rabbitmqctl}"

# A queue name is literal text; RabbitMQ permissions are regular expressions.
queue_pattern="^$(printf '%s' "$queue" | sed 's/[][\\.^$*+?(){}|/]/\\&/g')\$"

set_user() {  # NAME PASSWORD_FILE: create the user, or give an existing one this password
    if "${ctl[@]}" --quiet list_users --no-table-headers | cut -f1 | grep -Fxq -- "$1"; then
        head -n 1 "$2" | "${ctl[@]}" --quiet change_password "$1" > /dev/null
    else
        head -n 1 "$2" | "${ctl[@]}" --quiet add_user "$1" > /dev/null
    fi
}

"${ctl[@]}" --quiet add_vhost "$vhost" > /dev/null
set_user "$node_user" "$node_password_file"
set_user "$worker_user" "$worker_password_file"
"${ctl[@]}" --quiet set_permissions -p "$vhost" "$node_user" '^$' "$queue_pattern" '^$'
"${ctl[@]}" --quiet set_permissions -p "$vhost" "$worker_user" '.*' '.*' '.*'
echo "ett-broker-users: vhost $vhost: $node_user may publish to exchange $queue only;" \
     "$worker_user may do anything in $vhost"
