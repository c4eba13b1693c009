// runtime/ is built in rooms that include each other only downwards (docs/architecture.md):
// exec < {data, checkpoint, report} < dist < loop < {pipeline, single}. This test reads every
// source file's includes and fails on an include that goes up, sideways between rooms of one
// floor, into a room that does not exist, or into runtime/ from the libraries below it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kSource = PIPETRAIN_SOURCE_DIR;

// The floor of each room: a file may include its own room and the rooms on lower floors.
const std::map<std::string, int> kFloor = {
    {"exec", 0},   {"data", 1}, {"checkpoint", 1}, {"report", 1}, {"dist", 2},
    {"loop", 3},   {"pipeline", 4}, {"single", 4},
};

struct Include {
  std::string file, target;
  int line = 0;
};

std::vector<Include> includes_under(const fs::path& dir) {
  std::vector<Include> out;
  const std::regex inc(R"re(^\s*#\s*include\s+"([^"]+)")re");
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
    std::ifstream f(e.path());
    std::string line;
    int n = 0;
    while (std::getline(f, line)) {
      ++n;
      std::smatch m;
      if (std::regex_search(line, m, inc)) out.push_back({fs::relative(e.path(), kSource).string(), m[1], n});
    }
  }
  return out;
}

// "runtime/<room>/..." -> room; "" when the path is not under runtime/.
std::string room_of(const std::string& path) {
  if (path.rfind("runtime/", 0) != 0) return "";
  const size_t slash = path.find('/', 8);
  return slash == std::string::npos ? "<runtime/ itself>" : path.substr(8, slash - 8);
}

TEST(RuntimeRooms, EveryFileLivesInARoom) {
  for (const auto& e : fs::directory_iterator(kSource / "runtime")) {
    if (e.is_directory()) {
      EXPECT_TRUE(kFloor.count(e.path().filename().string()))
          << "runtime/" << e.path().filename().string() << "/ is not a room of kFloor (add it with its floor)";
    } else {
      EXPECT_EQ(e.path().filename().string(), "CMakeLists.txt")
          << "runtime/" << e.path().filename().string() << " lies outside the rooms";
    }
  }
}

TEST(RuntimeRooms, IncludesGoOnlyDownwards) {
  const std::vector<Include> incs = includes_under(kSource / "runtime");
  ASSERT_GT(incs.size(), 100u);  // the walk found the sources
  int checked = 0;
  for (const Include& i : incs) {
    const std::string to = room_of(i.target);
    if (to.empty()) continue;
    ++checked;
    const std::string from = room_of(i.file);
    ASSERT_TRUE(kFloor.count(from)) << i.file;
    ASSERT_TRUE(kFloor.count(to)) << i.file << ":" << i.line << " includes " << i.target << ", outside the rooms";
    EXPECT_TRUE(fs::exists(kSource / i.target)) << i.file << ":" << i.line << " includes " << i.target << ", which does not exist";
    if (from == to) continue;
    EXPECT_LT(kFloor.at(to), kFloor.at(from))
        << i.file << ":" << i.line << " (room " << from << ", floor " << kFloor.at(from) << ") includes " << i.target
        << " (room " << to << ", floor " << kFloor.at(to) << "): rooms include only lower floors";
  }
  EXPECT_GT(checked, 50);
}

TEST(RuntimeRooms, LibrariesBelowNeverIncludeTheRuntime) {
  for (const char* lib : {"core", "kernels", "importer", "partitioner"})
    for (const Include& i : includes_under(kSource / lib))
      EXPECT_TRUE(room_of(i.target).empty() && i.target.rfind("tools/", 0) != 0)
          << i.file << ":" << i.line << " includes " << i.target << ": " << lib << "/ lies below runtime/ and tools/";
}

}  // namespace
