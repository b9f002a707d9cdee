// Parity of the DeepSeek-V4.1 vision tower, aligner and image-span rows with DeepSeek's reference
// (inference/vision.py + model.py) on the tiny random models of
// ../shared/goldens/deepseek_v41_vision (weights written at test time from their recipes; pixel
// values from the goldens' preprocessing outputs, so this tests the tower alone), and its
// batching and threading invariance. Skips with a message when ../shared is absent.

#include "arch/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "arch/causal_lm.h"
#include "arch/vision_test_model.h"
#include "arch/vision_testing.h"
#include "tensor/dtype.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "model/synthetic_checkpoint.h"
#include "nlohmann/json.hpp"
#include "util/error_codes.h"
#include "util/mapped_file.h"
#include "util/sha256.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using Json = nlohmann::json;
using testing::Hex;
using testing::InMemoryVisionModel;
using testing::PixelValues;

using testing::CaseDir;

// One image of a case: its pixel values and the reference's outputs.
struct CaseImage {
  std::string stem;
  std::vector<float> pixels;  // [n_patches, 3, 14, 14]
  VisionImage image;
};

struct VisionCase {
  Json golden, outputs;  // golden.json, vision.json.gz
  std::unique_ptr<model::Model> model;
  std::unique_ptr<VisionTower> tower;
  std::vector<CaseImage> images;

  std::vector<VisionImage> Batch() const {
    std::vector<VisionImage> v;
    for (const CaseImage& im : images) v.push_back(im.image);
    return v;
  }
  // The reference's output `key` ("<stem>.vit" ...): [rows, width] f32.
  std::vector<float> Ref(const std::string& key, int64_t rows, int64_t width) const {
    EXPECT_TRUE(outputs.contains(key)) << key;
    if (!outputs.contains(key)) return {};
    EXPECT_EQ(outputs[key]["shape"].get<std::vector<int64_t>>(),
              (std::vector<int64_t>{rows, width}));
    return outputs[key]["data"].get<std::vector<float>>();
  }
};

std::unique_ptr<VisionCase> LoadCase(const std::string& name) {
  auto c = std::make_unique<VisionCase>();
  const std::string dir = CaseDir(name);
  std::ifstream in(dir + "/golden.json");
  EXPECT_TRUE(in) << dir;
  c->golden = Json::parse(in);
  auto text = util::ReadGzipFile(dir + "/vision.json.gz");
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return nullptr;
  c->outputs = Json::parse(*text);
  c->model = testing::LoadCaseModel(dir);
  if (c->model == nullptr) return nullptr;
  auto tower = CreateVisionTower(*c->model);
  EXPECT_TRUE(tower.ok()) << tower.status();
  if (!tower.ok()) return nullptr;
  c->tower = std::move(*tower);
  for (const Json& rec : c->golden["images"]) {
    CaseImage im;
    im.stem = std::filesystem::path(rec["image"].get<std::string>()).stem();
    im.pixels = PixelValues(dir, rec, c->golden["value_table"]);
    im.image = {nullptr, rec["plan"]["n_vit_h"].get<int32_t>(), rec["plan"]["n_vit_w"].get<int32_t>()};
    c->images.push_back(std::move(im));
  }
  for (CaseImage& im : c->images) im.image.pixel_values = im.pixels.data();
  return c;
}

double MaxAbsDiff(const std::vector<float>& a, const float* b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as a failure
  }
  return worst;
}

// Runs every image of the case in one batch and compares the ViT, aligner and span rows of each
// with the reference; prints the largest differences.
void ExpectCaseMatches(const std::string& name, double vit_tol, double aligner_tol) {
  auto c = LoadCase(name);
  ASSERT_TRUE(c && c->tower);
  VisionTower& t = *c->tower;
  const int64_t D = t.config().hidden, dim = t.text_hidden();
  const std::vector<VisionImage> batch = c->Batch();
  int64_t patches = 0, cells = 0, span_rows = 0;
  for (const VisionImage& im : batch) {
    patches += im.num_patches();
    cells += t.GridOf(im).num_cells();
    span_rows += t.GridOf(im).span_rows();
  }
  util::ThreadPool pool(2);
  std::vector<float> vit(patches * D), aligned(cells * dim), spans(span_rows * dim);
  t.EncodeVit(batch, vit.data(), pool);
  t.Align(batch, vit.data(), aligned.data(), pool);
  t.EmbedImages(batch, spans.data(), pool);
  int64_t p0 = 0, c0 = 0, s0 = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::string& stem = c->images[i].stem;
    const VisionImage& im = batch[i];
    const LlmGrid g = t.GridOf(im);
    const double dv = MaxAbsDiff(c->Ref(stem + ".vit", im.num_patches(), D), vit.data() + p0 * D);
    const double da = MaxAbsDiff(c->Ref(stem + ".aligner", g.num_cells(), dim),
                                 aligned.data() + c0 * dim);
    const double ds = MaxAbsDiff(c->Ref(stem + ".span", g.span_rows(), dim),
                                 spans.data() + s0 * dim);
    std::printf("%s %s: %lld patches, max |diff| vit %.3g, aligner %.3g, span %.3g\n",
                name.c_str(), stem.c_str(), static_cast<long long>(im.num_patches()), dv, da, ds);
    EXPECT_LE(dv, vit_tol) << stem;
    EXPECT_LE(da, aligner_tol) << stem;
    EXPECT_LE(ds, aligner_tol) << stem;
    p0 += im.num_patches();
    c0 += g.num_cells();
    s0 += g.span_rows();
  }
}

TEST(VisionTowerParityTest, ReleaseKnobsCaseMatchesTheReferenceOnEveryImage) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_a");
  ExpectCaseMatches("v41vis_a", 1e-5, 1e-5);
}

TEST(VisionTowerParityTest, EngramCaseWithThetaFiveHundredMatchesTheReferenceOnEveryImage) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_b_engram");
  ExpectCaseMatches("v41vis_b_engram", 1e-5, 1e-5);
}

TEST(VisionTowerTest, RecipeWeightsEqualTheReferencesWeightsBitForBit) {
  for (const char* name : {"v41vis_a", "v41vis_b_engram"}) {
    DI_SKIP_WITHOUT_VISION_GOLDENS(name);
    std::ifstream g(CaseDir(name) + "/golden.json"), r(CaseDir(name) + "/weights.json");
    auto tensors = model::DrawSyntheticTensors(Json::parse(r));
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    std::string all;
    for (const auto& t : *tensors) all.append(t.bytes.begin(), t.bytes.end());
    EXPECT_EQ(Hex(util::Sha256(all)), Json::parse(g)["weights_sha256"].get<std::string>()) << name;
  }
}

TEST(VisionTowerTest, CompositeConfigCarriesTheVisionConfig) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_b_engram");
  std::ifstream in(CaseDir("v41vis_b_engram") + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto c = model::ParseHfConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "deepseek_v41");
  ASSERT_TRUE(c->deepseek_v4 && c->deepseek_v4->vision);
  const model::DeepseekV41VisionConfig& v = *c->deepseek_v4->vision;
  EXPECT_EQ(v.num_layers, 3);
  EXPECT_EQ(v.hidden, 96);
  EXPECT_EQ(v.num_heads, 4);
  EXPECT_EQ(v.head_dim(), 24);
  EXPECT_EQ(v.intermediate, 192);
  EXPECT_EQ(v.patch_size, 14);
  EXPECT_EQ(v.rope_theta, 500.0f);
  EXPECT_EQ(v.downsample_ratio, 3);
  EXPECT_EQ(v.max_image_tokens, 64);
  EXPECT_EQ(v.min_pixels, 28224);
  EXPECT_FALSE(v.max_wh_ratio.has_value());
  EXPECT_EQ(v.image_token_id, c->vocab - 1);

  // Heads whose dimension is not a multiple of 4 have no 2-D rotary: rejected at load.
  Json j = Json::parse(text);
  j["vision_config"]["num_attention_heads"] = 8;  // 96 / 8 = 12 is fine
  EXPECT_TRUE(model::ParseHfConfig(j.dump()).ok());
  j["vision_config"]["num_attention_heads"] = 16;  // 6
  EXPECT_EQ(ErrorCodeOf(model::ParseHfConfig(j.dump()).status()), "bad_config");
  j["vision_config"].erase("hidden_size");
  EXPECT_EQ(ErrorCodeOf(model::ParseHfConfig(j.dump()).status()), "bad_config");
  j["vision_config"] = nullptr;  // a text-only composite
  auto text_only = model::ParseHfConfig(j.dump());
  ASSERT_TRUE(text_only.ok()) << text_only.status();
  EXPECT_FALSE(text_only->deepseek_v4->vision.has_value());
}

TEST(VisionTowerTest, SpanTokenTypesAndLengthsAreThePromptsOnes) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_b_engram");
  std::ifstream in(CaseDir("v41vis_b_engram") + "/golden.json");
  const Json g = Json::parse(in);
  const std::vector<int> types = g["e2e"]["token_types"].get<std::vector<int>>();
  for (const Json& s : g["e2e"]["spans"]) {
    const LlmGrid grid = LlmGridOf(s["n_vit_h"], s["n_vit_w"], 3);
    ASSERT_EQ(grid.span_rows(), s["length"].get<int64_t>());
    std::vector<ImageTokenType> got(grid.span_rows());
    ImageSpanTokenTypes(grid, got.data());
    for (int64_t i = 0; i < grid.span_rows(); ++i) {
      EXPECT_EQ(static_cast<int>(got[i]), types[s["start"].get<int64_t>() + i]) << i;
    }
  }
}

// Batching images together or running on more threads changes no bit of any image's rows.
TEST(VisionTowerTest, BatchedImagesAndThreadCountsGiveTheSameRowsAsOneImageAlone) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_b_engram");
  auto c = LoadCase("v41vis_b_engram");
  ASSERT_TRUE(c && c->tower);
  VisionTower& t = *c->tower;
  const std::vector<VisionImage> batch = c->Batch();
  int64_t rows = 0;
  for (const VisionImage& im : batch) rows += t.GridOf(im).span_rows();
  const int64_t dim = t.text_hidden();
  util::ThreadPool pool2(2), pool1(1);
  std::vector<float> together(rows * dim);
  t.EmbedImages({}, nullptr, pool2);  // a step without images
  t.EmbedImages(batch, together.data(), pool2);
  int64_t r0 = 0;
  for (const VisionImage& im : batch) {
    const int64_t n = t.GridOf(im).span_rows();
    std::vector<float> alone(n * dim);
    t.EmbedImages({&im, 1}, alone.data(), pool1);
    EXPECT_EQ(std::memcmp(alone.data(), together.data() + r0 * dim, alone.size() * 4), 0);
    r0 += n;
  }
}

TEST(VisionTowerTest, ModelWithoutVisionConfigHasNoTower) {
  model::Model m;
  m.config.name = "text";
  EXPECT_EQ(ErrorCodeOf(CreateVisionTower(m).status()), "unsupported_config");
}

// The text builder reads the composite checkpoint too (its tower loads through the text
// schema), and a tower of its own loads from the same Model.
TEST(VisionTowerTest, TextModelLoadsTheCompositeCheckpointBesideTheTower) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_a");
  auto folder = model::SyntheticCheckpoint(CaseDir("v41vis_a"),
                                           std::string(DI_TESTDATA_DIR) + "/deepseek_v41_vision");
  ASSERT_TRUE(folder.ok()) << folder.status();
  auto m = model::LoadModel(*folder);
  ASSERT_TRUE(m.ok()) << m.status();
  auto lm = CreateCausalLm(**m);
  ASSERT_TRUE(lm.ok()) << lm.status();
  ASSERT_NE((*lm)->vision_tower(), nullptr);
  EXPECT_EQ((*lm)->vision_tower()->text_hidden(), (*m)->config.hidden);
  auto tower = CreateVisionTower(**m);
  ASSERT_TRUE(tower.ok()) << tower.status();
  EXPECT_EQ((*tower)->text_hidden(), (*m)->config.hidden);
}

// ---- A direct double-precision transcription of vision.py, for the tests that run without
// ../shared: full softmax, angles in double. ------------------------------------------------

using Mat = std::vector<std::vector<double>>;

std::vector<double> Values(const model::Model& m, const std::string& name) {
  const tensor::TensorView& t = m.tensors.at(name);
  std::vector<double> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (t.dtype == tensor::DType::kF32) {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      v[i] = f;
    } else {
      uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);
      v[i] = tensor::Bf16ToFp32(b);
    }
  }
  return v;
}

Mat Dense(const model::Model& m, const std::string& w, const std::string& b, const Mat& x) {
  const std::vector<double> W = Values(m, w), B = b.empty() ? std::vector<double>() : Values(m, b);
  const size_t out = m.tensors.at(w).shape[0], in = m.tensors.at(w).shape[1];
  Mat y(x.size(), std::vector<double>(out));
  for (size_t t = 0; t < x.size(); ++t) {
    for (size_t o = 0; o < out; ++o) {
      double acc = B.empty() ? 0 : B[o];
      for (size_t i = 0; i < in; ++i) acc += W[o * in + i] * x[t][i];
      y[t][o] = acc;
    }
  }
  return y;
}

Mat Norm(const model::Model& m, const std::string& w, const Mat& x) {
  const std::vector<double> W = Values(m, w);
  Mat y = x;
  for (auto& row : y) {
    double ss = 0;
    for (double v : row) ss += v * v;
    const double inv = 1 / std::sqrt(ss / row.size() + 1e-6);
    for (size_t i = 0; i < row.size(); ++i) row[i] *= inv * W[i];
  }
  return y;
}

Mat NaiveAttention(const model::DeepseekV41VisionConfig& v, const Mat& qkv, int n_w) {
  const int D = v.hidden, hd = v.head_dim(), half = hd / 2, quarter = hd / 4;
  const size_t n = qkv.size();
  Mat q(n, std::vector<double>(D)), k = q, out = q;
  for (size_t t = 0; t < n; ++t) {
    for (int h = 0; h < v.num_heads; ++h) {
      for (int i = 0; i < half; ++i) {
        const double pos = i < quarter ? static_cast<double>(t / n_w) : static_cast<double>(t % n_w);
        const double a = pos * std::pow(v.rope_theta, -2.0 * (i % quarter) / half);
        for (auto [dst, src] : {std::pair{&q, 0}, std::pair{&k, D}}) {
          const double x1 = qkv[t][src + h * hd + i], x2 = qkv[t][src + h * hd + i + half];
          (*dst)[t][h * hd + i] = x1 * std::cos(a) - x2 * std::sin(a);
          (*dst)[t][h * hd + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
    }
  }
  for (size_t t = 0; t < n; ++t) {
    for (int h = 0; h < v.num_heads; ++h) {
      std::vector<double> s(n);
      double mx = -1e300, sum = 0;
      for (size_t j = 0; j < n; ++j) {
        s[j] = 0;
        for (int d = 0; d < hd; ++d) s[j] += q[t][h * hd + d] * k[j][h * hd + d];
        s[j] /= std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < n; ++j) {
        for (int d = 0; d < hd; ++d) out[t][h * hd + d] += s[j] / sum * qkv[j][2 * D + h * hd + d];
      }
    }
  }
  return out;
}

// One image's span rows, [span_rows, dim].
Mat NaiveSpan(const model::Model& m, const VisionImage& im) {
  const model::DeepseekV41VisionConfig& v = *m.config.deepseek_v4->vision;
  const int I = v.intermediate;
  Mat x(im.num_patches(), std::vector<double>(588));
  for (int64_t p = 0; p < im.num_patches(); ++p) {
    for (int i = 0; i < 588; ++i) x[p][i] = im.pixel_values[p * 588 + i];
  }
  x = Dense(m, "vision.patch_embed.proj.weight", "vision.patch_embed.proj.bias", x);
  for (int l = 0; l < v.num_layers; ++l) {
    const std::string p = fmt::format("vision.blocks.{}.", l);
    Mat qkv = Dense(m, p + "attn.wqkv.weight", p + "attn.wqkv.bias", Norm(m, p + "norm1.weight", x));
    Mat o = Dense(m, p + "attn.wo.weight", p + "attn.wo.bias", NaiveAttention(v, qkv, im.n_vit_w));
    for (size_t t = 0; t < x.size(); ++t) {
      for (int d = 0; d < v.hidden; ++d) x[t][d] += o[t][d];
    }
    Mat g = Dense(m, p + "mlp.w1.weight", "", Norm(m, p + "norm2.weight", x));
    for (auto& row : g) {
      for (int i = 0; i < I; ++i) row[i] = row[i] / (1 + std::exp(-row[i])) * row[I + i];
      row.resize(I);
    }
    o = Dense(m, p + "mlp.w2.weight", "", g);
    for (size_t t = 0; t < x.size(); ++t) {
      for (int d = 0; d < v.hidden; ++d) x[t][d] += o[t][d];
    }
  }
  x = Norm(m, "vision.norm.weight", x);
  const LlmGrid grid = LlmGridOf(im.n_vit_h, im.n_vit_w, 3);
  Mat cells(grid.num_cells(), std::vector<double>(9 * v.hidden, 0.0));
  for (int64_t c = 0; c < grid.num_cells(); ++c) {
    for (int kh = 0; kh < 3; ++kh) {
      for (int kw = 0; kw < 3; ++kw) {
        const int64_t ph = c / grid.n_w * 3 + kh, pw = c % grid.n_w * 3 + kw;
        if (ph >= im.n_vit_h || pw >= im.n_vit_w) continue;
        for (int d = 0; d < v.hidden; ++d) cells[c][d * 9 + kh * 3 + kw] = x[ph * im.n_vit_w + pw][d];
      }
    }
  }
  Mat a = Dense(m, "aligner.w1.weight", "aligner.w1.bias", cells);
  for (auto& row : a) {
    for (double& y : row) y = 0.5 * y * (1 + std::erf(y / std::sqrt(2.0)));
  }
  a = Dense(m, "aligner.w2.weight", "aligner.w2.bias", a);
  Mat span;
  auto vec = [&](const char* name) {
    const std::vector<double> r = Values(m, name);
    span.push_back(r);
  };
  vec("image_start");
  for (int h = 0; h < grid.n_h; ++h) {
    for (int w = 0; w < grid.n_w; ++w) span.push_back(a[h * grid.n_w + w]);
    vec("image_newline");
  }
  vec("image_end");
  return span;
}

// Without ../shared: grids of one patch, of partial aligner cells and of more patches than a key
// block and a query chunk, on the kernel's fast path (head 16) and its generic one (head 24),
// against the double-precision transcription above.
TEST(VisionTowerTest, MatchesADirectTranscriptionOfTheReferenceOnOddGrids) {
  for (const auto& [D, heads, theta] : {std::tuple{32, 2, 10000.0f}, std::tuple{48, 2, 500.0f}}) {
    auto m = InMemoryVisionModel(2, D, heads, 40, 24, theta);
    auto tower = CreateVisionTower(*m);
    ASSERT_TRUE(tower.ok()) << tower.status();
    const std::vector<std::pair<int, int>> grids = {{1, 1}, {5, 7}, {17, 4}, {2, 40}};
    std::vector<std::vector<float>> pixels;
    std::vector<VisionImage> images;
    int64_t rows = 0;
    for (auto [h, w] : grids) {
      std::vector<float>& px = pixels.emplace_back(int64_t{h} * w * 588);
      for (size_t i = 0; i < px.size(); ++i) px[i] = std::sin(0.37f * i + h) * 0.9f;
      images.push_back({px.data(), h, w});
      rows += (*tower)->GridOf(images.back()).span_rows();
    }
    util::ThreadPool pool(2);
    std::vector<float> got(rows * 24);
    (*tower)->EmbedImages(images, got.data(), pool);
    const float* row = got.data();
    for (const VisionImage& im : images) {
      const Mat want = NaiveSpan(*m, im);
      ASSERT_EQ(static_cast<int64_t>(want.size()), (*tower)->GridOf(im).span_rows());
      double worst = 0;
      for (const auto& w : want) {
        for (size_t d = 0; d < w.size(); ++d) worst = std::max(worst, std::fabs(w[d] - row[d]));
        row += 24;
      }
      EXPECT_LT(worst, 1e-5) << "D " << D << ", grid " << im.n_vit_h << " x " << im.n_vit_w;
    }
  }
}

}  // namespace
}  // namespace deepinfer::arch
