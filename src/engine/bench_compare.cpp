#include "engine/bench_compare.h"

#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace mox::engine {

std::vector<std::string> llama_bench_args(const BenchConfig& c, const std::vector<std::string>& extra) {
    std::vector<std::string> a{"-m", c.model, "-r", "1", "-o", "json"};
    auto add = [&](const char* flag, const std::string& v) {
        a.emplace_back(flag);
        a.push_back(v);
    };
    const BenchTest& t = c.test;
    if (t.n_prompt > 0 && t.n_gen > 0) {
        add("-p", "0");
        add("-n", "0");
        add("-pg", fmt::format("{},{}", t.n_prompt, t.n_gen));
    } else {
        add("-p", std::to_string(t.n_prompt));
        add("-n", std::to_string(t.n_gen));
    }
    add("-d", std::to_string(t.n_depth));
    add("-t", std::to_string(c.threads));
    add("-ctk", c.type_k);
    add("-ctv", c.type_v);
    add("-b", std::to_string(c.n_batch));
    add("-ub", std::to_string(c.n_ubatch));
    add("-ngl", std::to_string(c.n_gpu_layers));
    add("-ncmoe", std::to_string(c.n_cpu_moe));
    if (!c.override_tensor.empty()) add("-ot", c.override_tensor);
    if (!c.moe_cpu_layers.empty())
        fail("--moe-cpu-layers has no llama-bench equivalent: give the same layers as -ot rules to compare");
    add("-fa", c.flash_attn < 0 ? "auto" : c.flash_attn == 0 ? "off" : "on");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

std::vector<std::string> split_args(std::string_view text) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        const size_t start = i;
        while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        if (i > start) out.emplace_back(text.substr(start, i - start));
    }
    return out;
}

LlamaBenchSample parse_llama_bench_json(std::string_view text, const BenchConfig& c) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) fail("llama-bench output is not a JSON array");
    if (j.size() != 1)
        fail("llama-bench printed {} result rows; one invocation must give exactly one", j.size());
    const nlohmann::json& row = j[0];
    if (!row.is_object()) fail("llama-bench result row is not an object");
    auto int_field = [&](const char* key) {
        if (!row.contains(key) || !row[key].is_number_integer())
            fail("llama-bench row has no integer '{}'", key);
        return row[key].get<int64_t>();
    };
    const int64_t np = int_field("n_prompt"), ng = int_field("n_gen"), nd = int_field("n_depth");
    if (np != c.test.n_prompt || ng != c.test.n_gen || nd != c.test.n_depth)
        fail("llama-bench ran pp{} tg{} at depth {}, expected {}", np, ng, nd, c.test.name());
    auto first_or = [&](const char* samples, const char* avg) {
        if (row.contains(samples) && row[samples].is_array() && row[samples].size() == 1 &&
            row[samples][0].is_number())
            return row[samples][0].get<double>();
        if (row.contains(avg) && row[avg].is_number()) return row[avg].get<double>();
        fail("llama-bench row has neither one '{}' nor '{}'", samples, avg);
    };
    LlamaBenchSample s;
    s.ns = first_or("samples_ns", "avg_ns");
    s.tokens_per_s = first_or("samples_ts", "avg_ts");
    if (!(s.ns > 0) || !(s.tokens_per_s > 0)) fail("llama-bench reported a time or rate <= 0");
    if (row.contains("build_commit") && row["build_commit"].is_string()) s.build_commit = row["build_commit"];
    return s;
}

namespace {

struct Pipe {
    int fd[2] = {-1, -1};
    Pipe() {
        if (pipe2(fd, O_CLOEXEC) != 0) fail("pipe: {}", std::strerror(errno));
    }
    ~Pipe() {
        for (int f : fd)
            if (f >= 0) close(f);
    }
    void close_end(int i) {
        if (fd[i] >= 0) close(fd[i]);
        fd[i] = -1;
    }
};

}  // namespace

ProcessResult run_process(const std::string& program, const std::vector<std::string>& args) {
    Pipe out, err;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out.fd[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err.fd[1], STDERR_FILENO);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, program.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) fail("cannot start '{}': {}", program, std::strerror(rc));
    out.close_end(1);
    err.close_end(1);

    // Both pipes drained together: a child that fills one while we block on the other would hang.
    ProcessResult r;
    pollfd fds[2] = {{out.fd[0], POLLIN, 0}, {err.fd[0], POLLIN, 0}};
    std::string* sink[2] = {&r.out, &r.err};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            fail("poll: {}", std::strerror(errno));
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                sink[i]->append(buf, static_cast<size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) fail("waitpid: {}", std::strerror(errno));
    r.exit_code =
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return r;
}

LlamaBenchSample run_llama_bench(const std::string& program, const BenchConfig& config,
                                 const std::vector<std::string>& extra) {
    const std::vector<std::string> args = llama_bench_args(config, extra);
    const ProcessResult p = run_process(program, args);
    if (p.exit_code != 0) {
        std::string cmd = program;
        for (const auto& a : args) cmd += " " + a;
        const std::string tail = p.err.size() > 2000 ? p.err.substr(p.err.size() - 2000) : p.err;
        fail("--compare: '{}' exited with {}; its last stderr lines:\n{}", cmd, p.exit_code, tail);
    }
    try {
        return parse_llama_bench_json(p.out, config);
    } catch (const Error& e) {
        fail("--compare: {} ({})", e.what(), program);
    }
}

}  // namespace mox::engine
